package errcode

// Codes of durable tasks (issue 30).
const (
	// TaskNotFound: no task of that id for this caller (another caller's task is not found either).
	TaskNotFound = "TASK_NOT_FOUND"
	// TaskLimitReached: the caller already has its maximum of open tasks (429).
	TaskLimitReached = "TASK_LIMIT_REACHED"
	// TaskFinished: the task is already completed, failed or cancelled, so it cannot be cancelled (409).
	TaskFinished = "TASK_FINISHED"
)
