"""Token options, scopes and job patterns (api.auth), without a server."""
import pytest

from spark_governor.api.auth import Principal, TokenSpec, hash_token, parse_token_option


def test_token_option_forms():
    name, spec = parse_token_option("ops=s3cret-long")
    assert name == "ops" and spec == TokenSpec("s3cret-long", ("admin",), None)
    name, spec = parse_token_option("team-a:report+read:team-a-*+shared-?=abc:def=ghi")
    assert name == "team-a" and spec.secret == "abc:def=ghi"
    assert spec.scopes == ("report", "read") and spec.jobs == ("team-a-*", "shared-?")
    for bad in ("ops=short", "=secret123", "ops:root=secret123", "a:b:c:d=secret123", "bad name=secret123",
                "ops:report:bad/pattern=secret123"):
        with pytest.raises(ValueError):
            parse_token_option(bad)


def test_scopes_imply_and_patterns_limit():
    admin = Principal("a", frozenset({"admin"}))
    assert all(admin.has(s) for s in ("report", "read", "write", "admin")) and admin.may_access("anything")
    writer = Principal("w", frozenset({"write"}), ("team-a-*",))
    assert writer.has("read") and writer.has("write") and not writer.has("report") and not writer.has("admin")
    assert writer.may_access("team-a-x") and not writer.may_access("team-b-x") and not writer.may_access(None)
    reporter = Principal("r", frozenset({"report"}))
    assert reporter.has("report") and not reporter.has("read")


def test_hash_is_sha256_hex_and_never_the_secret():
    h = hash_token("my-secret-value")
    assert len(h) == 64 and "my-secret-value" not in h
