package memoryhook

import (
	"context"
	"errors"
	"math"

	"github.com/tidwall/gjson"
)

// Result is one memory tool_result.
type Result struct {
	Command string // the command as sent ("" when missing or not a string)
	Content string // the tool_result content
	IsError bool
	// Wrote: the store may have changed. True for a successful create,
	// str_replace, insert, delete or rename, and for one of those that failed
	// for an unexpected reason (I/O, database), since it may have got part
	// way; false for anything refused before a write (bad input, guard,
	// limits, missing paths). The loop must not retry a call after Wrote.
	Wrote bool
	// Err is the failure for logs and metrics (nil on success). It may hold
	// host paths: never send it to the model; Content is what the model gets.
	Err error
	// Unavailable: the failure was the store's, not the call's.
	Unavailable bool
	// Refused is why the scopes or the gate refused the call (read_only,
	// secret, rate); "" otherwise.
	Refused string
}

// Exec parses one memory tool_use input (a raw JSON object), guards its
// paths, runs it against st for sc and returns the tool_result content the
// official helpers would: the command's text, or "Error: " + the error
// sentence with IsError (the TS tool runner's wrapping).
func Exec(ctx context.Context, st Store, sc Scope, input []byte) Result {
	r := execute(ctx, st, sc, input)
	if r.Command != "view" || r.IsError { // a view's formatter cuts it, with a note on how to see the rest
		r.Content = bound(r.Content, sc.Limits.OrDefaults().MaxViewChars)
	}
	return r
}

func execute(ctx context.Context, st Store, sc Scope, input []byte) Result {
	in := gjson.ParseBytes(input)
	if !gjson.ValidBytes(input) || !in.IsObject() {
		return fail("", errorf("The memory tool input must be a JSON object."))
	}
	if k, ok := duplicateKey(in); ok {
		// gjson reads the first copy, other parsers (and a transcript's
		// reader) the last: what runs would not be what an audit sees.
		return fail("", errorf("The memory tool input has the key %q more than once.", k))
	}
	cmdv := in.Get("command")
	if !cmdv.Exists() {
		return fail("", errorf("Missing required parameter `command`."))
	}
	if cmdv.Type != gjson.String {
		return fail("", errorf("Parameter `command` must be a string."))
	}
	cmd := cmdv.Str
	a := args{cmd: cmd, in: in}
	var out string
	var err error
	write := true
	switch cmd {
	case "view":
		write = false
		p := a.path("path")
		vr := a.viewRange()
		if a.err == nil {
			out, err = st.View(ctx, sc, p, vr)
		}
	case "create":
		p := a.path("path")
		text := a.str("file_text", false)
		if a.err == nil {
			out, err = st.Create(ctx, sc, p, text)
		}
	case "str_replace":
		p := a.path("path")
		oldStr := a.str("old_str", false)
		newStr := a.str("new_str", true) // newer docs: leaving it out deletes old_str
		if a.err == nil {
			out, err = st.StrReplace(ctx, sc, p, oldStr, newStr)
		}
	case "insert":
		p := a.path("path")
		line := a.integer("insert_line")
		text := a.str("insert_text", false)
		if a.err == nil {
			out, err = st.Insert(ctx, sc, p, line, text)
		}
	case "delete":
		p := a.path("path")
		if a.err == nil {
			out, err = st.Delete(ctx, sc, p)
		}
	case "rename":
		from := a.path("old_path")
		to := a.path("new_path")
		if a.err == nil {
			out, err = st.Rename(ctx, sc, from, to)
		}
	default:
		return Result{Command: cmd, Content: "Error: unknown memory command " + cmd, IsError: true,
			Err: errorf("unknown memory command %s", cmd)}
	}
	if a.err != nil {
		return fail(cmd, a.err)
	}
	if err != nil {
		r := fail(cmd, err)
		r.Wrote = write && r.Unavailable
		return r
	}
	return Result{Command: cmd, Content: out, Wrote: write}
}

func fail(cmd string, err error) Result {
	var me *Error
	if errors.As(err, &me) {
		r := Result{Command: cmd, Content: "Error: " + me.Msg, IsError: true, Err: err}
		if rf := (*Refusal)(nil); errors.As(err, &rf) {
			r.Refused = rf.Reason
		}
		return r
	}
	return Result{Command: cmd, Content: "Error: memory store unavailable: " + publicReason(err),
		IsError: true, Err: err, Unavailable: true}
}

// args reads typed fields of one input, keeping the first problem.
type args struct {
	cmd string
	in  gjson.Result
	err error
}

func (a *args) get(field string) (gjson.Result, bool) {
	if a.err != nil {
		return gjson.Result{}, false
	}
	v := a.in.Get(field)
	if !v.Exists() {
		a.err = errorf("Missing required parameter `%s` for command `%s`.", field, a.cmd)
		return v, false
	}
	return v, true
}

func (a *args) str(field string, optional bool) string {
	if optional && a.err == nil && !a.in.Get(field).Exists() {
		return ""
	}
	v, ok := a.get(field)
	if !ok {
		return ""
	}
	if v.Type != gjson.String {
		a.err = errorf("Parameter `%s` of command `%s` must be a string.", field, a.cmd)
		return ""
	}
	return v.Str
}

func (a *args) path(field string) Path {
	raw := a.str(field, false)
	if a.err != nil {
		return Path{}
	}
	p, err := ParsePath(raw)
	if err != nil {
		a.err = err
	}
	return p
}

// whole returns v as an int if it is an integral JSON number in range.
func whole(v gjson.Result) (int, bool) {
	if v.Type != gjson.Number || v.Num != math.Trunc(v.Num) || math.Abs(v.Num) > 1<<53 {
		return 0, false
	}
	return int(v.Num), true
}

func (a *args) integer(field string) int {
	v, ok := a.get(field)
	if !ok {
		return 0
	}
	n, ok := whole(v)
	if !ok {
		a.err = errorf("Parameter `%s` of command `%s` must be an integer.", field, a.cmd)
	}
	return n
}

// viewRange reads the optional view_range: two integers, the end -1 or not
// before the start. The SDKs ignore a malformed range; ctxproxy says so.
func (a *args) viewRange() []int {
	if a.err != nil {
		return nil
	}
	v := a.in.Get("view_range")
	if !v.Exists() || v.Type == gjson.Null {
		return nil
	}
	bad := errorf("Parameter `view_range` of command `view` must be a list of two integers [start, end], end -1 for the end of the file.")
	items := v.Array()
	if !v.IsArray() || len(items) != 2 {
		a.err = bad
		return nil
	}
	start, ok1 := whole(items[0])
	end, ok2 := whole(items[1])
	if !ok1 || !ok2 {
		a.err = bad
		return nil
	}
	return []int{start, end}
}

// duplicateKey returns a key the object has more than once (keys compared
// unescaped, so "comm\u0061nd" is "command").
func duplicateKey(obj gjson.Result) (dup string, found bool) {
	seen := make(map[string]struct{}, 8)
	obj.ForEach(func(k, _ gjson.Result) bool {
		if _, ok := seen[k.Str]; ok {
			dup, found = k.Str, true
			return false
		}
		seen[k.Str] = struct{}{}
		return true
	})
	return dup, found
}
