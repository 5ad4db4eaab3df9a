"""memwork.loggable: an error as it may be logged -- a code, and a reason with no request value, no
response body and no query string, whatever form the backend echoed the request in."""

from __future__ import annotations

import html
import json
import re
import unicodedata
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memwork.errors import BackendTimeout, UsageError
from memwork.http import HttpError
from memwork.loggable import MAX_REASON_CHARS, loggable_error, request_values

USER = "Alice.Private+Zq@example.com"
QUERY = 'my HIV test results zqvx "positive" & café'
SESSION = "sess-Zq/Ωmega 42"
REQUEST = {"userId": USER, "query": QUERY, "sessionId": SESSION, "limit": 7}
CODE_RE = re.compile(r"[a-z][a-z0-9_]*\Z")


def forms(value: str) -> set[str]:
    """The forms a test looks for: raw, percent-encoded, JSON-escaped, HTML-escaped, in any case."""
    out = {
        value,
        " ".join(value.split()),
        quote(value, safe="", errors="surrogatepass"),
        quote(value, errors="surrogatepass"),
        quote_plus(value, errors="surrogatepass"),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        html.escape(value),
        unicodedata.normalize("NFD", value),
    }
    return {f.casefold() for f in out}


def leaked(text: str, request: dict[str, object]) -> list[str]:
    """Every form of every text value of ``request`` found in ``text`` (case-insensitively)."""
    folded = text.casefold()
    values = [v for v in request.values() if isinstance(v, str)]
    return [form for value in values for form in forms(value) if form in folded]


def echo_messages(request: dict[str, object]) -> list[str]:
    """Error texts as backends write them when they echo the request."""
    body = json.dumps(request)
    url_query = "&".join(f"{k}={quote_plus(str(v), errors='surrogatepass')}" for k, v in request.items())
    user_path = quote(str(request["userId"]), safe="", errors="surrogatepass")
    fastapi_422 = json.dumps(
        {"detail": [{"type": "missing", "loc": ["body", "x"], "msg": "Field required", "input": request}]}
    )
    return [
        f'letta GET http://127.0.0.1:9/v1/search: HTTP 400: {{"detail": "invalid /v1/search?{url_query}"}}',
        f"langgraph POST http://127.0.0.1:9/runs/wait: HTTP 422: {fastapi_422}",
        f"HTTPConnectionPool(host='h', port=1): Max retries exceeded with url: /search?{url_query} (x)",
        f"connection refused: http://u:pw@h:1/users/{user_path}/s?{url_query}",
        f"no such user {str(request['userId']).upper()} for {str(request['query']).lower()}",
        f"bad body {body} and {json.dumps(request, ensure_ascii=False)}",
        f"value {request['sessionId']!r} rejected: {html.escape(str(request['query']))}",
    ]


@pytest.mark.parametrize("message", echo_messages(REQUEST))
def test_no_form_of_a_request_value_survives(message: str) -> None:
    assert leaked(message, REQUEST)  # the message does echo the request
    problem = loggable_error(message, REQUEST)
    assert leaked(problem.line(), REQUEST) == [], problem
    assert "?" not in problem.reason and "pw" not in problem.reason
    assert CODE_RE.match(problem.code)


def test_a_response_body_never_survives_even_without_request_values() -> None:
    problem = loggable_error('qdrant POST http://h:6333/points: HTTP 400: {"status": {"error": "Bad"}}')
    assert problem.code == "http_400" and problem.reason == "qdrant POST http://h:6333/points: HTTP 400"


def test_an_http_error_keeps_its_summary_only() -> None:
    error = HttpError(
        "letta GET http://h/v1/x: HTTP 422: anything", summary="letta GET http://h/v1/x: HTTP 422", status=422
    )
    assert loggable_error(error, REQUEST).line() == "http_422: letta GET http://h/v1/x: HTTP 422"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (BackendTimeout("letta.resolve timed out after 300 ms"), "timeout"),
        (TimeoutError(), "timeout"),
        (ConnectionRefusedError("[Errno 111] Connection refused"), "connection_refused"),
        (ConnectionResetError("reset by peer"), "connection_error"),
        (UsageError("userId", USER, "too long"), "invalid_input"),
        (RuntimeError("boom"), "runtime_error"),
        (HttpError("x", kind="malformed_response"), "malformed_response"),
        ("exploding resolve failed: RuntimeError: boom", "runtime_error"),
        ("letta.resolve timed out after 300 ms", "timeout"),
        ("MEMORY_BACKEND='x' unavailable (disabled)", "unavailable"),
        ("something odd", "error"),
    ],
)
def test_codes_come_from_a_fixed_vocabulary(error: BaseException | str, code: str) -> None:
    problem = loggable_error(error, REQUEST)
    assert problem.code == code
    assert USER not in problem.line()


def test_a_word_of_the_query_echoed_alone_is_removed_but_other_words_stay() -> None:
    problem = loggable_error("the index has no term zqvx (HIV) for this caller", REQUEST)
    assert problem.reason == "the index has no term <query> (<query>) for this caller"


def test_a_value_that_looks_like_a_marker_is_removed_too() -> None:
    request = {"userId": "<userId>", "query": "<query> zzq"}
    problem = loggable_error("echo <userId> and <query> zzq", request)
    assert "zzq" not in problem.reason and problem.reason.count("<") == 2


def test_reasons_are_capped_and_single_line_without_control_characters() -> None:
    problem = loggable_error("first\x1b[31m line " + "x" * 500 + "\nsecond line holds SQL", {})
    assert len(problem.reason) <= MAX_REASON_CHARS and "second" not in problem.reason
    assert "\x1b" not in problem.reason


def test_a_request_key_never_names_a_marker() -> None:
    request = {"userId": "u-1234", "alice@example.com": "value-zz9"}
    problem = loggable_error("got value-zz9", request)
    assert problem.reason == "got <value>" and "alice" not in problem.line()


def test_request_values_skip_numbers_and_roles() -> None:
    values = request_values(
        {
            "userId": "u-9",
            "limit": 5,
            "embedding": [0.1],
            "messages": [{"role": "user", "content": "hi there"}],
        }
    )
    assert dict((v, n) for n, v in values.values) == {"u-9": "userId", "hi there": "content"}
    assert set(values.words) == {"there"}


# ---- property: whatever the values and however they are echoed, none survives --------------------
VALUE = st.text(alphabet=st.characters(), min_size=1, max_size=30).map(
    lambda body: f"Zq{body}Qz"
)  # bracketed, so no form of a value is a substring of memwork's own words


@settings(max_examples=300, deadline=None)
@given(user=VALUE, query=VALUE, session=VALUE, pick=st.integers(min_value=0, max_value=6))
def test_property_no_request_value_survives_any_echo(user: str, query: str, session: str, pick: int) -> None:
    request = {"userId": user, "query": query, "sessionId": session}
    message = echo_messages(request)[pick]
    problem = loggable_error(message, request)
    assert leaked(problem.line(), request) == [], (message, problem)
    assert CODE_RE.match(problem.code) and len(problem.reason) <= MAX_REASON_CHARS


# ---- echoes cut short (found by the second adversarial pass: an embedder's error quoted a truncated query)
CUT_QUERY = "昨日の検査結果はどうでしたか 私のHIV testresults were positive"


@pytest.mark.parametrize(
    "echo",
    [
        "の検査結果はどうでした",  # a CJK run cut at both ends: no word boundary to find
        "検査",  # two characters of it
        "testresul",  # a Latin word cut short at its end
        "tresults",  # ... at its start
        "stresu",  # ... at both
        "positiv",
    ],
)
def test_an_echo_cut_short_leaves_no_piece_of_the_query(echo: str) -> None:
    reason = loggable_error(f"ValueError: cannot embed {echo!r} (model refused)", {"query": CUT_QUERY}).reason
    assert echo not in reason and "cannot embed" in reason and "model refused" in reason


def test_unspaced_text_that_shares_no_character_with_the_request_stays() -> None:
    reason = loggable_error("RuntimeError: 服务器错误", {"query": "where do I live"}).reason
    assert "服务器错误" in reason


@settings(max_examples=200, deadline=None)
@given(
    query=st.text(alphabet=st.characters(whitelist_categories=("Lo",)), min_size=2, max_size=30),
    start=st.integers(min_value=0, max_value=29),
    length=st.integers(min_value=1, max_value=30),
)
def test_property_no_piece_of_an_unspaced_query_survives(query: str, start: int, length: int) -> None:
    piece = query[start : start + length]
    reason = loggable_error(f"Error: saw {piece}", {"query": query}).reason
    unspaced = re.findall(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]", piece)
    assert not any(ch in reason for ch in unspaced)
