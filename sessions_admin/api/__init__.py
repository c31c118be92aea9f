"""The HTTP API (``/api/v1/``): a second door beside the console, through the same core and
``ledger.actions`` (docs/api.md). ``app`` holds the ninja API and its URLs, ``auth`` the
tokens, scopes and throttle, ``problems`` the error bodies, one router module per domain."""
