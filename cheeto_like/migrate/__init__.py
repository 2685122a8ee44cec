"""Moving in: importing a cheeto v2 (reference) database into this store."""
