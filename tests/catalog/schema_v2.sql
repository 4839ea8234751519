-- A catalog as schema version 2 wrote it, with rows. Never edit: it is
-- what an old daemon left on disk, and the migration test opens it.
CREATE TABLE snapshots (
	fp TEXT NOT NULL PRIMARY KEY,
	name TEXT NOT NULL,
	shards INTEGER NOT NULL CHECK (shards > 0),
	spec_path TEXT NOT NULL,
	compression TEXT NOT NULL,
	suffix TEXT NOT NULL DEFAULT '',
	chunk_size INTEGER NOT NULL,
	expire_after INTEGER NOT NULL DEFAULT -1,
	pending_expiry INTEGER NOT NULL,
	keep INTEGER NOT NULL DEFAULT 0,
	created INTEGER NOT NULL,
	last_read INTEGER NOT NULL DEFAULT 0,
	registered INTEGER NOT NULL DEFAULT 0);
CREATE INDEX snapshots_name ON snapshots (name, registered);
CREATE TABLE runs (
	run_id TEXT NOT NULL PRIMARY KEY,
	fp TEXT NOT NULL REFERENCES snapshots (fp) ON DELETE CASCADE,
	host TEXT NOT NULL,
	pid INTEGER NOT NULL,
	pid_start INTEGER NOT NULL,
	started INTEGER NOT NULL,
	heartbeat INTEGER NOT NULL,
	state TEXT NOT NULL CHECK (state IN ('active', 'done', 'dead')));
CREATE INDEX runs_fp ON runs (fp);
CREATE TABLE shards (
	fp TEXT NOT NULL REFERENCES snapshots (fp) ON DELETE CASCADE,
	idx INTEGER NOT NULL CHECK (idx >= 0),
	state TEXT NOT NULL DEFAULT 'absent' CHECK (state IN
		('absent', 'running', 'materialized', 'failed')),
	run_id TEXT,
	raw_bytes INTEGER NOT NULL DEFAULT 0,
	stored_bytes INTEGER NOT NULL DEFAULT 0,
	chunks INTEGER NOT NULL DEFAULT 0,
	exit_status INTEGER NOT NULL DEFAULT -1,
	error TEXT,
	last_read INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (fp, idx)) WITHOUT ROWID;
ALTER TABLE shards ADD COLUMN stderr_tail TEXT;
ALTER TABLE shards ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
CREATE INDEX shards_last_read ON shards (last_read);
CREATE INDEX snapshots_last_read ON snapshots (last_read);

INSERT INTO snapshots VALUES (
	'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb',
	'wiki-tokens', 4, '/srv/pipelines/wiki.yaml', 'zstd:3', '.bin',
	4194304, 604800, 3600, 2, 1700000000, 1700000900, 3);
INSERT INTO runs VALUES (
	'22222222222222222222222222222222',
	'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb',
	'node7', 4242, 987654, 1700000100, 1700000200, 'active');
INSERT INTO shards VALUES (
	'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb',
	0, 'materialized', '22222222222222222222222222222222',
	1000000, 250000, 1, -1, NULL, 1700000900, NULL, 3);
INSERT INTO shards VALUES (
	'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb',
	1, 'failed', '22222222222222222222222222222222',
	0, 0, 0, 256, 'stage 0 ''tokenize.py'' exited with status 1', 0,
	'Traceback (most recent call last):
ValueError: bad line', 1);
INSERT INTO shards VALUES (
	'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb',
	2, 'running', '22222222222222222222222222222222',
	0, 0, 0, -1, NULL, 0, NULL, 1);
INSERT INTO shards (fp, idx) VALUES (
	'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', 3);
PRAGMA user_version = 2;
