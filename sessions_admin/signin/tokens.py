"""Whether an API token's creator still vouches for it.

Only admins create tokens on the console (``console.views.api_tokens``), so a token an
operator created there works while that operator is an active admin: deactivated or deleted
(``ApiToken.creator_gone``), or no longer an admin (demoted to support or viewer), the token
is refused from its next request, as the operator could no longer create it. Tokens the
``api_token`` command created belong to no account.
"""

from __future__ import annotations

from sessions_admin.ledger.models import ApiToken
from sessions_admin.signin.roles import role_of

CREATOR_NOT_ADMIN = "creator not an admin"


def creator_demoted(token: ApiToken) -> bool:
    """The operator who created ``token`` on the console holds an account, but not as an admin."""
    if not token.created_by_operator or token.created_by_id is None:
        return False
    return role_of(token.created_by) != "admin"


def token_state(token: ApiToken, now) -> str:
    """``ApiToken.state_at``, and "creator not an admin" for a demoted creator's token: the
    state a request at ``now`` would be judged by."""
    state = token.state_at(now)
    if state == "active" and creator_demoted(token):
        return CREATOR_NOT_ADMIN
    return state
