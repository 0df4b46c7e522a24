"""The team store (DESIGN §21): a shared PostgreSQL database that several
machines' loopctl homes check before they act. psycopg is imported only
here, and only when a store is set."""
