"""weaver.ops: the torch references, one file per op and no model state; every kernel is tested against them."""
