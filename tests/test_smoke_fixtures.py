import psycopg
import pymysql


def test_embedded_pg_has_pgvector(pg_url):
    with psycopg.connect(pg_url) as conn:
        version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    assert version is not None and version[0].startswith("0.")


def test_mariadb_database_is_fresh(mysql_url):
    name = mysql_url.rsplit("/", 1)[1]
    conn = pymysql.connect(host="127.0.0.1", user="root", database=name)
    with conn.cursor() as cur:
        cur.execute("SHOW TABLES")
        assert cur.fetchall() == ()
