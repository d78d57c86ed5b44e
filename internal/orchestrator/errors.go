package orchestrator

import "errors"

// ErrStopped is returned for work offered after Stop began.
var ErrStopped = errors.New("orchestrator is stopping")
