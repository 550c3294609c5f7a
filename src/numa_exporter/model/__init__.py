"""Model: topology, placement, home nodes, locality, binding and drift from parsed data."""
