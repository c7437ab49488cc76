"""Services: the rules (first-or-duplicate, sequence fencing, leases), calling stores only."""
