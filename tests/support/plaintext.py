"""Scans for content in clear: every cell of the database, every value of a Redis database."""

from __future__ import annotations

from django.db import connection


def cells_holding(text: str) -> list[tuple[str, str]]:
    """Return every (table, column) of the database with a value that holds `text` in clear."""
    needle = text.encode()
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            columns = [
                c.name for c in connection.introspection.get_table_description(cursor, table)
            ]
            quoted = ", ".join(connection.ops.quote_name(name) for name in columns)
            cursor.execute(f"SELECT {quoted} FROM {connection.ops.quote_name(table)}")
            for row in cursor.fetchall():
                for name, value in zip(columns, row, strict=True):
                    if isinstance(value, memoryview | bytes | bytearray):
                        hit = needle in bytes(value)
                    else:
                        hit = value is not None and text in str(value)
                    if hit:
                        found.append((table, name))
    return sorted(set(found))


def redis_keys_holding(url: str, text: str) -> list[str]:
    """Return every key of the Redis database at `url` whose name or value holds `text`."""
    import redis

    needle = text.encode()
    client = redis.Redis.from_url(url)
    readers = {
        b"string": lambda key: [client.get(key) or b""],
        b"hash": lambda key: [part for item in client.hgetall(key).items() for part in item],
        b"list": lambda key: client.lrange(key, 0, -1),
        b"set": lambda key: list(client.smembers(key)),
        b"zset": lambda key: client.zrange(key, 0, -1),
        b"stream": lambda key: [
            part for _, fields in client.xrange(key) for item in fields.items() for part in item
        ],
    }
    found = []
    try:
        for key in client.scan_iter():
            values = readers.get(client.type(key), lambda key: [])(key)
            if needle in key or any(needle in value for value in values):
                found.append(key.decode(errors="replace"))
    finally:
        client.close()
    return sorted(found)
