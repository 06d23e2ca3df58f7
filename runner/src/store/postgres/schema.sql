-- ralph state store, PostgreSQL schema version 1 (runner/src/store/postgres/schema.rs applies it
-- once, under an advisory lock, and records the version in `ralph_schema`).

-- One row per job: the immutable request plus the projection columns used for listing and
-- queueing, written in the same transaction as each event.
CREATE TABLE jobs (
    id          text PRIMARY KEY,
    kind        text NOT NULL,
    state       text NOT NULL CHECK (state IN ('queued', 'running', 'finished')),
    outcome     text,
    rounds      integer NOT NULL DEFAULT 0,
    priority    integer NOT NULL DEFAULT 0,
    created_at  text NOT NULL,
    updated_at  text NOT NULL,
    last_seq    bigint NOT NULL,
    spec        text NOT NULL
);
-- The queue (claimed with FOR UPDATE SKIP LOCKED) and the per-state listings.
CREATE INDEX jobs_queue ON jobs (priority DESC, created_at, id) WHERE state = 'queued';
CREATE INDEX jobs_state ON jobs (state, created_at, id);

-- The journals: append-only.
CREATE TABLE events (
    job_id  text NOT NULL REFERENCES jobs (id),
    seq     bigint NOT NULL,
    at      text NOT NULL,
    type    text NOT NULL,
    data    text NOT NULL,
    PRIMARY KEY (job_id, seq)
);

CREATE FUNCTION ralph_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only' USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION ralph_events_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION ralph_events_append_only();

CREATE FUNCTION ralph_job_request_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.spec <> OLD.spec
        OR NEW.created_at <> OLD.created_at THEN
        RAISE EXCEPTION 'a job''s request is immutable' USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER jobs_request_immutable BEFORE UPDATE ON jobs
    FOR EACH ROW EXECUTE FUNCTION ralph_job_request_immutable();
