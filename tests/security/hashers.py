"""A password hasher that counts its work, to show when a sign-in costs no hash at all."""

from __future__ import annotations

from django.contrib.auth.hashers import MD5PasswordHasher


class CountingHasher(MD5PasswordHasher):
    calls = 0

    def encode(self, password, salt):
        CountingHasher.calls += 1
        return super().encode(password, salt)

    def verify(self, password, encoded):
        CountingHasher.calls += 1
        return super().verify(password, encoded)
