"""Tables, listings and plots of the studies' results."""
