package memoryhook

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// Error is a command failure the model is meant to read: Exec sends
// "Error: " + Msg with is_error set. Every outcome the spec names (missing
// path, already exists, limits, bad input) is an *Error.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func errorf(format string, args ...any) *Error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

// Sentinels a Backend returns; the command layer turns them into the spec's
// sentences, so every store words them identically.
var (
	ErrNotExist = errors.New("memoryhook: no such file or directory")
	ErrExist    = errors.New("memoryhook: already exists")
	ErrNotFile  = errors.New("memoryhook: not a regular file")
	ErrSymlink  = errors.New("memoryhook: symbolic link on the path")
	// ErrHardLink: a regular file with more than one link (planted from
	// outside: the tool never makes one) shares its bytes with a name
	// elsewhere, maybe outside the tenant; it is neither read nor written.
	ErrHardLink = errors.New("memoryhook: file has other hard links")
)

// NotDirError is returned by a Backend when an ancestor that must be a
// directory (to create or rename into) is a file.
type NotDirError struct{ Path Path }

func (e *NotDirError) Error() string { return "memoryhook: " + e.Path.String() + " is not a directory" }

// UnavailableError says the store could not run a command at all (I/O error,
// database down). Reason is shown to the model and must hold no internal
// detail (host paths, DSNs); Err is kept for logs.
type UnavailableError struct {
	Reason string
	Err    error
}

func (e *UnavailableError) Error() string {
	if e.Err == nil {
		return "memory store unavailable: " + e.Reason
	}
	return "memory store unavailable: " + e.Reason + ": " + e.Err.Error()
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable wraps err as an UnavailableError with a model-safe reason.
func Unavailable(reason string, err error) error {
	return &UnavailableError{Reason: reason, Err: err}
}

// publicReason is what the model may learn about an unexpected store error:
// the errno text of an OS error (never its path), or a generic phrase.
func publicReason(err error) string {
	var ue *UnavailableError
	var errno syscall.Errno
	switch {
	case errors.As(err, &ue):
		return ue.Reason
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "request canceled"
	case errors.As(err, &errno):
		return errno.Error()
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	case errors.Is(err, os.ErrClosed):
		return "store closed"
	default:
		return "internal error"
	}
}
