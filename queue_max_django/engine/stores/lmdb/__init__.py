"""The embedded LMDB store: a directory of LMDB environments on this machine (see store.py)."""
