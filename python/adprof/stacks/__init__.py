"""`adprof run --stacks` on a Python program: python/adprof/stacks/__main__.py."""
