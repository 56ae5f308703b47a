"""Signing in to the console: a browser trades a console token for a sign-in, once.

The token itself is sent only in the sign-in request. What the browser keeps is a sign-in: a random id
in a cookie (``HttpOnly``, ``SameSite=Strict``, ``Path=/``, ``Secure`` over TLS) named after the port the
browser reached the console on, so two consoles on one host keep two sign-ins and signing out of one
leaves the other. The console holds each sign-in in memory, by the SHA-256 of its id, with an expiry;
signing out ends that one, and a token made anew (``sql-runner console --print-token``) ends every
sign-in made with the one it replaces.

Cookies are not kept apart by port, so every other service on the host receives the sign-in's cookie.
It is not a token (it opens nothing as ``Authorization: Bearer``), it ends with the sign-in, and alone
it cannot act: a request that changes anything must also carry the sign-in's anti-forgery key, which the
sign-in answer hands to the console's own script once and which the browser keeps in the storage of the
console's origin (scheme, host and port), never in a cookie or a page.

Each sign-in form carries a one-time nonce, so a sign-in request cannot be replayed, nor made from
another site's page (the request's ``Origin`` must be the console's, too).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from runner.core.protocol.console import digest

COOKIE_PREFIX = "sql_runner_console_"
LIFETIME = 12 * 3600.0  # seconds a sign-in lasts, however active
IDLE = 2 * 3600.0  # seconds a sign-in lasts without a request
NONCE_LIFETIME = 600.0  # seconds a sign-in form can be sent
NONCES_KEPT = 1024  # forms handed out and not yet used: the oldest is forgotten first
SIGN_INS_KEPT = 4096


def cookie_name(port: int) -> str:
    """The sign-in cookie of a console the browser reaches on ``port``."""
    return f"{COOKIE_PREFIX}{port}"


@dataclass
class SignIn:
    """One browser's sign-in: the token it was made with (by name and digest) and its anti-forgery key."""

    holder: str
    token_digest: str
    key: str  # the anti-forgery key the console's script sends with every request that changes anything
    made: float
    seen: float


class Refusal(StrEnum):
    """Why a sign-in cookie opens nothing."""

    UNKNOWN = "you are not signed in (or were signed out): sign in again"
    EXPIRED = "your sign-in has expired: sign in again"
    REVOKED = "the token you signed in with was replaced or removed: sign in with the current one"


class SignIns:
    """The sign-ins and sign-in forms of one console, in memory. ``clock`` gives seconds (monotonic)."""

    def __init__(self, *, lifetime: float = LIFETIME, idle: float = IDLE, clock: Callable[[], float] = time.monotonic):
        self.lifetime, self.idle, self.clock = lifetime, idle, clock
        self._sign_ins: OrderedDict[str, SignIn] = OrderedDict()
        self._nonces: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    # ---- sign-in forms -----------------------------------------------------------------------

    def nonce(self) -> str:
        """A one-time value for a sign-in form."""
        made = secrets.token_urlsafe(24)
        with self._lock:
            self._nonces[digest(made)] = self.clock() + NONCE_LIFETIME
            while len(self._nonces) > NONCES_KEPT:
                self._nonces.popitem(last=False)
        return made

    def use_nonce(self, given: str) -> bool:
        """Whether ``given`` is a form's nonce, handed out, unexpired and not used before (it is used now)."""
        with self._lock:
            expires = self._nonces.pop(digest(given), None)
        return expires is not None and expires > self.clock()

    # ---- sign-ins ----------------------------------------------------------------------------

    def make(self, holder: str, token: str) -> tuple[str, SignIn]:
        """A new sign-in for the holder of ``token``: (the id for the cookie, the sign-in)."""
        made = secrets.token_urlsafe(32)
        now = self.clock()
        sign_in = SignIn(holder, digest(token), secrets.token_urlsafe(32), now, now)
        with self._lock:
            self._forget_expired(now)
            self._sign_ins[digest(made)] = sign_in
            while len(self._sign_ins) > SIGN_INS_KEPT:
                self._sign_ins.popitem(last=False)
        return made, sign_in

    def find(self, given: str, holder_of_digest: Callable[[str], str | None]) -> SignIn | Refusal:
        """The sign-in whose id is ``given``, if it is current and its token still the holder's; it is seen now."""
        now = self.clock()
        key = digest(given)
        with self._lock:
            sign_in = self._sign_ins.get(key)
            if sign_in is None:
                return Refusal.UNKNOWN
            if now - sign_in.made > self.lifetime or now - sign_in.seen > self.idle:
                del self._sign_ins[key]
                return Refusal.EXPIRED
        if holder_of_digest(sign_in.token_digest) != sign_in.holder:
            self.end(given)
            return Refusal.REVOKED
        sign_in.seen = now
        return sign_in

    def end(self, given: str) -> None:
        """Sign out: the sign-in whose id is ``given`` opens nothing any more."""
        with self._lock:
            self._sign_ins.pop(digest(given), None)

    def _forget_expired(self, now: float) -> None:
        expired = [
            key
            for key, sign_in in self._sign_ins.items()
            if now - sign_in.made > self.lifetime or now - sign_in.seen > self.idle
        ]
        for key in expired:
            del self._sign_ins[key]


def same_key(sign_in: SignIn, given: str) -> bool:
    """Whether ``given`` is the sign-in's anti-forgery key (compared in constant time)."""
    return bool(given) and hmac.compare_digest(given.encode(), sign_in.key.encode())
