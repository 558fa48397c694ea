"""Embedding-initialisation methods, one module each, behind one registry.

Each module registers its methods with :func:`embtransfer.transfer.methods.base.register`;
:func:`embtransfer.transfer.methods.base.get_method` imports the module a config name
needs (see :mod:`embtransfer.transfer.method_catalog`) and returns the method.
"""
