"""What-if grids and capacity searches over the engines."""
