"""The runtime's session store: unmanaged models mirroring Hermes's state.db and its schema.

Operations that change the store live in ``sessions_admin.core``.
"""
