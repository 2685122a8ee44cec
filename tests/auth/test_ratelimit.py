"""The sign-in limiter: per key, within a window, cleared by success (user only)."""

from cheeto_like.auth.ratelimit import LoginLimiter


def test_failures_lock_until_they_age_out():
    limiter = LoginLimiter(max_failures=3, window=60)
    keys = ["user:alice", "addr:10.0.0.1"]
    for t in range(3):
        assert limiter.retry_after(keys, now=100 + t) == 0
        limiter.failed(keys, now=100 + t)
    assert limiter.retry_after(keys, now=110) == 50
    assert limiter.retry_after(["user:bob", "addr:10.0.0.1"], now=110) == 50  # same address
    assert limiter.retry_after(["user:alice", "addr:10.0.0.2"], now=110) == 50  # same user
    assert limiter.retry_after(["user:bob", "addr:10.0.0.2"], now=110) == 0
    assert limiter.retry_after(keys, now=161) == 0


def test_success_clears_the_user_not_the_address():
    limiter = LoginLimiter(max_failures=2, window=60)
    limiter.failed(["user:alice", "addr:a"], now=0)
    limiter.failed(["user:alice", "addr:a"], now=1)
    limiter.succeeded("user:alice")
    assert limiter.retry_after(["user:alice"], now=2) == 0
    assert limiter.retry_after(["addr:a"], now=2) > 0
