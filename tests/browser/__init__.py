def open_support_actions(page) -> None:
    """Open the session page's support actions panel (one line until opened)."""
    page.locator("#session-actions summary.sa-summary").click()
