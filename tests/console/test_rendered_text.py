"""Assistant content is rendered as markdown on the server and sanitized; the journal stays raw."""

from __future__ import annotations

import re
import time
import uuid

import pytest
from django.urls import reverse

from agentloom.engine.testing import ScriptedGateway
from agentloom.providers import ProviderError
from context_app import engine_adapter
from sessions_app.templatetags import console_text
from sessions_app.templatetags.console_text import is_long, render_markdown, thousands
from tests.factories import ask
from tests.support.plaintext import cells_holding, redis_keys_holding

MARKDOWN = (
    "**Bold** and `code`.\n\n"
    "```python\nprint('<b>hi</b>')\n```\n\n"
    "[safe](https://example.org/a) [bad](javascript:alert(1)) [worse](JAVASCRIPT:alert(2)) "
    "[data](data:text/html,<script>alert(3)</script>)\n\n"
    '<a href="javascript:alert(4)">raw</a> <script>alert(5)</script> <img src=x onerror=alert(6)>'
    "\n\n![pixel](https://tracker.example/p.png)"
)


def test_markdown_is_rendered_and_code_blocks_get_a_copy_button():
    html = render_markdown(MARKDOWN)
    assert "<strong>Bold</strong>" in html and "<code>code</code>" in html
    assert "print('&lt;b&gt;hi&lt;/b&gt;')" in html
    assert 'data-copy="code"' in html and '<span class="code-lang">python</span>' in html


def test_raw_html_images_and_unsafe_links_never_become_markup():
    html = render_markdown(MARKDOWN)
    assert '<a href="https://example.org/a" rel="noopener noreferrer nofollow">safe</a>' in html
    hrefs = re.findall(r'<a [^>]*href="([^"]*)"', html)
    assert hrefs == ["https://example.org/a", "https://tracker.example/p.png"]
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(5)&lt;/script&gt;" in html  # shown as the model wrote it
    assert 'href="https://tracker.example/p.png"' in html  # an image is a link, never loaded


def test_a_fence_language_cannot_smuggle_attributes():
    html = render_markdown('```js" onclick="alert(1)\nx\n```')
    assert "onclick" not in html and 'class="language-js"' in html


def test_table_alignment_is_a_class_never_an_inline_style():
    html = render_markdown("| a | b |\n|:-|-:|\n| 1 | 2 |")
    assert 'class="align-right"' in html and "style=" not in html


def test_long_text_and_thousands():
    assert not is_long("short") and is_long("x" * 1201) and is_long("line\n" * 16)
    assert thousands(150000) == "150,000" and thousands(None) == "" and thousands("a") == "a"


@pytest.mark.django_db
def test_the_chat_renders_answers_as_markdown_and_the_journal_keeps_them_raw(
    client_for, session, alice
):
    ask(session, alice, "# Title\n\n**NONCE-BOLD** [x](javascript:alert(1))")
    client = client_for(alice)
    chat = client.get(reverse("console-chat", args=[session.pk])).content.decode()
    answer = chat[chat.index('class="msg answer"') :]
    assert "<strong>NONCE-BOLD</strong>" in answer
    assert 'href="javascript' not in chat
    assert 'data-copy="message"' in answer
    journal = client.get(reverse("console-journal", args=[session.pk])).content.decode()
    assert "**NONCE-BOLD**" in journal and "<strong>NONCE-BOLD</strong>" not in journal


@pytest.mark.django_db
def test_long_questions_are_collapsed_with_show_all(client_for, session, alice):
    ask(session, alice, "NONCE-LONG" + " word" * 400)
    chat = client_for(alice).get(reverse("console-chat", args=[session.pk])).content.decode()
    question = chat[chat.index('class="msg question"') :]
    assert 'class="text-block collapsed"' in question
    assert "Show all (2,010 characters)" in question


@pytest.fixture
def failing_model():
    """A model whose provider refuses the key."""
    script = ScriptedGateway([ProviderError("auth", status=401)])
    engine_adapter.set_gateway_factory(lambda version, connection: script)
    yield script
    engine_adapter.set_gateway_factory(None)


@pytest.mark.django_db
def test_a_run_error_links_to_the_model_connection(client_for, session, alice, failing_model):
    run = ask(session, alice, "hello")
    assert run.status == "failed"
    connection = session.agent_version.model_connection
    link = reverse("admin:models_app_modelconnection_change", args=[connection.pk])
    chat_url = reverse("console-chat", args=[session.pk])
    assert link not in client_for(alice).get(chat_url).content.decode()  # not staff
    alice.is_staff = True
    alice.save()
    client = client_for(alice)
    html = client.get(chat_url).content.decode()
    status_line = html[html.index('class="status-line"') :].split("</p>")[0]
    assert "The provider rejected the credentials." in status_line and link in status_line
    panel = client.get(reverse("console-run-panel", args=[run.pk])).content.decode()
    assert link in panel


# --- rendered once, bounded, never stored ------------------------------------------------------


@pytest.fixture
def renders(monkeypatch):
    """Count markdown-it renders, with this process's rendered answers forgotten first."""
    from markdown_it import MarkdownIt

    console_text.RENDERED.clear()
    calls: list[int] = []
    real = MarkdownIt.render

    def counted(self, text, env=None):
        calls.append(len(text))
        return real(self, text, env)

    monkeypatch.setattr(MarkdownIt, "render", counted)
    yield calls
    console_text.RENDERED.clear()


def _views_of(client, run) -> list[str]:
    """Return the chat page, the run's block and the records fragment, as HTML."""
    session_id = run.session_id
    return [
        client.get(reverse("console-chat", args=[session_id])).content.decode(),
        client.get(reverse("console-run-block", args=[run.pk])).content.decode(),
        client.get(reverse("console-chat-records", args=[session_id])).content.decode(),
    ]


@pytest.mark.django_db
def test_an_answer_is_rendered_once_for_every_page_that_shows_it(
    client_for, session, alice, renders
):
    run = ask(session, alice, "**NONCE-ONCE** in bold")
    client = client_for(alice)
    first = _views_of(client, run)
    assert len(renders) == 1, "the first page renders the answer"
    again = _views_of(client, run)
    assert len(renders) == 1, "later pages, blocks and fragments reuse the rendering"
    for page in first + again:
        assert "<strong>NONCE-ONCE</strong>" in page


def _table(chars: int) -> str:
    rows = ["| id | name | value | note |", "|---|---|---:|---|"]
    size = sum(len(row) + 1 for row in rows)
    while size < chars:
        n = len(rows)
        rows.append(f"| {n} | item <b>{n}</b> | {n * 3.14:.2f} | a *note* on `row` {n} |")
        size += len(rows[-1]) + 1
    return "\n".join(rows)


def test_an_answer_above_the_bound_is_shown_as_written_with_a_notice(renders):
    huge = _table(808_000)
    started = time.process_time()
    html = render_markdown(huge)
    elapsed = time.process_time() - started
    print(f"808 KB table answer: {elapsed * 1000:.1f} ms of CPU")  # see the note on the bound
    assert renders == [], "markdown-it never sees an answer above the bound"
    assert f"{len(huge):,} characters" in html and "shown as written" in html
    assert "item &lt;b&gt;7&lt;/b&gt;" in html and "<b>" not in html
    assert '<pre class="as-written">' in html and html.count("<pre") == 1
    at_bound = _table(console_text.MARKDOWN_MAX_CHARS - 100)
    assert "<table>" in render_markdown(at_bound) and len(renders) == 1


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_rendered_answers_are_kept_in_no_database_and_no_redis(
    client_for, session, alice, renders, redis_url, settings
):
    import redis

    # Django's cache on Redis, so that anything a page puts in a cache would land there.
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url}
    }
    redis.Redis.from_url(redis_url).flushdb()
    nonce = f"NONCE-RENDER-{uuid.uuid4().hex}"
    run = ask(session, alice, f"**{nonce}** and a | table |\n|---|\n| {nonce} |")
    for page in _views_of(client_for(alice), run):
        assert f"<strong>{nonce}</strong>" in page
    assert len(renders) == 1
    assert cells_holding(nonce) == []
    assert redis_keys_holding(redis_url, nonce) == []


def test_the_rendered_texts_kept_stay_within_their_bound():
    kept = console_text.RenderedTexts(max_chars=100)
    keys = [kept.key(f"text {n}") for n in range(3)]
    assert len(set(keys)) == 3 and all(b"text" not in key for key in keys)
    for key in keys:
        kept.put(key, "x" * 40)
    assert kept.get(keys[0]) is None, "the least recently used goes first"
    assert kept.get(keys[1]) and kept.get(keys[2])
    kept.put(kept.key("huge"), "x" * 101)
    assert kept.get(kept.key("huge")) is None, "one text above the bound is never kept"
