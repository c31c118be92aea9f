"""Demo data and checks: the seeder, the runtime simulator and the consistency checker.

Above the ledger, below the console: they drive the core and read the store and the
ledger the way an operator or a runtime would, and nothing below imports them.
"""
