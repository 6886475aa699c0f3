"""Analysis passes over TVM Relax graphs. Each returns plain data (see `passes.graph`)."""
