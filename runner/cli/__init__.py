"""``sql-runner``, the command line: parsing options and printing results, nothing more.

Commands are short: shared options and preconditions are decorators (``options``,
``requires``), and every command's work lives in the control plane, imported lazily.
Nothing imports this package back.
"""
