"""microbench-node: every GPU of a node (and of a job) measured at once and judged against its
peers and its own noise (issue 47; docs/node-check.md)."""
