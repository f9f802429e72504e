package handler

// TemporaryError marks a failure that a retry may fix (a service that is
// down): the result carries its message, and a process per run exits 75.
// Make one with Temporary; find one with errors.As.
type TemporaryError struct{ Err error }

func (e *TemporaryError) Error() string   { return e.Err.Error() }
func (e *TemporaryError) Unwrap() error   { return e.Err }
func (e *TemporaryError) permanent() bool { return false }

// PermanentError marks a failure that no retry can fix (an object that
// asks for the impossible): the result says "permanent": true, the object
// is Stalled at once, and a process per run exits 0 (the result explains
// it). Make one with Permanent; find one with errors.As.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string   { return e.Err.Error() }
func (e *PermanentError) Unwrap() error   { return e.Err }
func (e *PermanentError) permanent() bool { return true }

// Temporary marks err as a temporary failure. Temporary(nil) is nil, so
// that `return nil, handler.Temporary(call())` succeeds when call does.
func Temporary(err error) error {
	if err == nil {
		return nil
	}
	return &TemporaryError{Err: err}
}

// Permanent marks err as a permanent failure. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// kind is what TemporaryError and PermanentError share: errors.As with a
// *kind finds whichever of them wraps the other, the outer one.
type kind interface {
	error
	permanent() bool
}
