"""The console: server-rendered pages for a session's creator: home, chat, journal, run context.

Pages read through the selectors the REST API uses, so the access rule is the same: a session and
everything in it exists only for its creator while a member of its space; anyone else gets 404.
Writes go through the services. Everything is rendered on the server, once: while a run is active
static/console/console.js fetches the same templates served alone and puts them in place.

- `urls`: the routes, their names and the `pk` converter.
- `pages`: the full pages (home, chat, journal, run context).
- `spaces`: a space's page: its retention rule, previewed and set by its admins.
- `fragments`: the parts the pages poll (the sessions table, a session's state, chat records, a
  run's block, panel and meter, journal rows) and the one builder of each, which pages reuse.
- `actions`: the forms a page posts (new session, ask, rename, pin, delete, fork, revoke a view,
  legal hold).
- `presenters`: what the pages show of records, the meter, model calls and costs.
- `forms`: the query parameters and posted ids, read by the REST API's rules.
- `errors`: `console_errors`, the one decorator that maps application errors to 404, 403 or a
  message on the page an action returns to.

Formatting done in the templates (markdown, units, thousands) is in
`sessions_app.templatetags.console_text`.
"""
