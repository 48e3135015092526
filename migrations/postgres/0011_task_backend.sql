-- 0011: the backend's own task behind a durable task (issue 30). When the aggregator follows a backend's task (a
-- backend that declared tasks for tools/call), backend_task_id is the backend's task id and backend_server the id of
-- the server it runs on, so that when the node following it dies another node resumes following it (tasks/get,
-- tasks/result on the backend), or fails the task when the backend no longer knows it (a stdio child dies with its
-- node). Both are empty while the task is held around a plain call. input_request is the request the backend's
-- task waits on while the task is input_required (an elicitation or sampling request relayed to the task's
-- client, as JSON: method and params), so that a client reading the task from another session sees what it waits
-- for; NULL otherwise.

ALTER TABLE mcp.tasks
    ADD COLUMN backend_task_id VARCHAR(512) NOT NULL DEFAULT '',
    ADD COLUMN backend_server  VARCHAR(512) NOT NULL DEFAULT '',
    ADD COLUMN input_request   JSON;
