"""What a forward pass, an engine call and a speculative iteration cost; memory plans."""
