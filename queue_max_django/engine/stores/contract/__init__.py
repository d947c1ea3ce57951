"""The store contract's parts beside ``stores/base.py``'s ``Store``: one protocol per topic (a ``Store``
hands each out, or includes it), each with its ``[sc_...]`` rules, which the contract suite
(``tests/store_contract/``) runs against every store kind. ``stores/base.py``'s module docstring says what
every operation shares."""
