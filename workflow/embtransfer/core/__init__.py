"""Workflow plumbing every stage uses: config, paths, grid, logs, atomic writes, code hashes."""
