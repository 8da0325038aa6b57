// Package yamldoc reads ctxproxy's YAML files (tenant policies, prices.yaml)
// strictly and alike: exactly one document, its problems at their line, and
// mappings whose keys are plain, known and given once. yaml.v3's decoding
// into structs is lenient (a second document, a duplicate key in some
// forms, an alias or merge key that hides a value); these files are read as
// nodes instead, through this one reader.
package yamldoc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Error is a problem of a YAML file at a line (0: the file as a whole).
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// ErrEmpty is Read's error for a file with no document, or an empty one.
var ErrEmpty = errors.New("file is empty")

var lineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Read parses data as exactly one YAML document and returns its root node
// (aliases not yet resolved: see Resolve). A syntax error is an *Error
// "invalid YAML: …" at its line, a second document an *Error at its line,
// and no document ErrEmpty.
func Read(data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, ErrEmpty
		}
		msg, line := err.Error(), 0
		if m := lineRe.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		} else {
			msg = strings.TrimPrefix(msg, "yaml: ")
		}
		return nil, &Error{Line: line, Msg: "invalid YAML: " + msg}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{Line: extra.Line, Msg: "a policy or prices file holds one YAML document; found a second one"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, ErrEmpty
		}
		root = root.Content[0]
	}
	return root, nil
}

// Resolve follows aliases to the node they stand for.
func Resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// Fields calls fn, in order, with each key of the mapping n that is a plain
// name, not a merge key (<<), not seen before and in known, and its value
// (aliases resolved); it returns the problems of the other keys, each at
// its line. where names the mapping in the messages. n not a mapping is
// the caller's to report.
func Fields(n *yaml.Node, where string, known []string, fn func(key string, k, v *yaml.Node)) []*Error {
	var errs []*Error
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], Resolve(n.Content[i+1])
		key := k.Value
		switch prev, dup := seen[key]; {
		case k.Kind != yaml.ScalarNode:
			errs = append(errs, &Error{k.Line, where + ": keys must be plain names"})
		case key == "<<":
			errs = append(errs, &Error{k.Line, where + ": merge keys (<<) are not supported"})
		case dup:
			errs = append(errs, &Error{k.Line, fmt.Sprintf("%s: duplicate key %q (first at line %d)", where, key, prev)})
		case !contains(known, key):
			seen[key] = k.Line
			errs = append(errs, &Error{k.Line, fmt.Sprintf("unknown key %q in %s (known: %s)", key, where, strings.Join(known, ", "))})
		default:
			seen[key] = k.Line
			fn(key, k, v)
		}
	}
	return errs
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
