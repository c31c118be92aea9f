"""Signing in and staying signed in: throttling, session lifetime, the server's secret key.

- Throttling is django-axes (settings ``AXES_*``): ``lockout`` supplies the client address
  it counts by and the lockout page it answers with.
- ``middleware.SessionLifetimeMiddleware`` ends sessions that sat idle too long or outlived
  their absolute lifetime; the sign-in time is stamped by ``apps`` on ``user_logged_in``.
- ``checks`` refuses to serve without ``SESSIONS_ADMIN_SECRET_KEY``.
- ``views.signin_failures``: failed sign-ins and current lockouts, for admins.
"""
