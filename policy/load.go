package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/ctxproxy/ctxproxy/internal/yamldoc"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"gopkg.in/yaml.v3"
)

// LoadError is one problem in one policy file. Line is 0 when the problem is about the whole file.
type LoadError struct {
	File string
	Line int
	Msg  string
}

func (e LoadError) Error() string {
	if e.File == "" {
		return e.Msg
	}
	if e.Line <= 0 {
		return e.File + ": " + e.Msg
	}
	return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
}

// LoadErrors is every problem found while loading a policy folder, sorted by file and line.
type LoadErrors []LoadError

func (es LoadErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// PricesFile is the name of the price table kept beside the policies (owned by package tokens);
// it is not a tenant policy and LoadDir skips it.
const PricesFile = "prices.yaml"

// isPolicyFile says whether a directory entry is loaded as a tenant policy: *.yaml and *.yml, except
// prices.yaml/prices.yml and hidden files (editors' swap and lock files such as .#acme.yaml).
// Examples that must not load are shipped as *.yaml.example.
func isPolicyFile(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	ext := filepath.Ext(name)
	if ext != ".yaml" && ext != ".yml" {
		return false
	}
	base := strings.TrimSuffix(name, ext)
	return base != "prices"
}

// LoadDir loads and validates every policy file in dir. When any file is bad it returns a nil Set
// and LoadErrors listing every problem found (not just the first).
func LoadDir(dir string) (*Set, error) { return loadDir(dir, true) }

// LoadDirWithoutKeys is LoadDir for the tools that read the policies but never call upstream
// (`ctxproxy report`, `ctxproxy memory` on the store): the tenants' upstream keys
// (upstream.api_key_env, api_key_file) are not read, so these tools run without the serving
// process's secrets; every other check is LoadDir's.
func LoadDirWithoutKeys(dir string) (*Set, error) { return loadDir(dir, false) }

func loadDir(dir string, readKeys bool) (*Set, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("load policies: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() || !isPolicyFile(e.Name()) {
			continue
		}
		if e.Type()&os.ModeSymlink != 0 {
			// A symlink to a directory is not a policy; a symlink to a file is (k8s ConfigMaps).
			if fi, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && fi.IsDir() {
				continue
			}
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)

	var errs LoadErrors
	var policies []*Policy
	for _, name := range names {
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, LoadError{File: path, Msg: err.Error()})
			continue
		}
		p, fileErrs := parseFile(path, name, data, readKeys)
		errs = append(errs, fileErrs...)
		if p != nil && len(fileErrs) == 0 {
			policies = append(policies, p)
		}
	}

	set, setErrs := newSet(policies)
	errs = append(errs, setErrs...)
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool {
			if errs[i].File != errs[j].File {
				return errs[i].File < errs[j].File
			}
			return errs[i].Line < errs[j].Line
		})
		return nil, errs
	}
	set.Dir = dir
	return set, nil
}

// Parse parses and validates one policy file's contents; name is the file's base name (it decides
// whether the file is default.yaml). Cross-file checks (duplicate tenants and keys) are LoadDir's.
func Parse(path string, data []byte) (*Policy, error) {
	p, errs := parseFile(path, filepath.Base(path), data, true)
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

func parseFile(path, name string, data []byte, readKeys bool) (*Policy, LoadErrors) {
	ps := &parser{file: path}
	root, err := yamldoc.Read(data)
	var ye *yamldoc.Error
	switch {
	case errors.Is(err, yamldoc.ErrEmpty):
		ps.add(0, "%s", "file is empty; a policy needs at least `tenant: NAME`")
		return nil, ps.errs
	case errors.As(err, &ye):
		ps.add(ye.Line, "%s", ye.Msg)
		return nil, ps.errs
	case err != nil:
		ps.add(0, "%s", err.Error())
		return nil, ps.errs
	}
	// A key pasted into a policy is reported before anything else reads the file, and alone:
	// the other checks quote values.
	if ps.findPastedKeys(root); len(ps.errs) > 0 {
		return nil, ps.errs
	}
	isDefault := name == "default.yaml" || name == "default.yml"
	p := ps.policy(root, isDefault)
	if len(ps.errs) > 0 {
		return nil, ps.errs
	}
	p.File = path
	if readKeys {
		ps.readUpstreamKey(p, filepath.Dir(path), isDefault)
	}
	if len(ps.errs) > 0 {
		return nil, ps.errs
	}
	if err := p.render(); err != nil {
		ps.add(p.Line, "%s", err.Error())
		return nil, ps.errs
	}
	if err := p.renderCandidates(); err != nil {
		ps.add(p.Line, "%s", err.Error())
		return nil, ps.errs
	}
	return p, nil
}

type parser struct {
	file string
	errs LoadErrors
	// shadowCMs are the shadow candidates' context_management nodes, read once the tenant's
	// policy is whole (shadowCandidates).
	shadowCMs []*yaml.Node
}

func (ps *parser) add(line int, format string, args ...any) {
	ps.errs = append(ps.errs, LoadError{File: ps.file, Line: line, Msg: redactKeys(fmt.Sprintf(format, args...))})
}

func resolve(n *yaml.Node) *yaml.Node { return yamldoc.Resolve(n) }

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "null"
		case "!!str":
			return strconv.Quote(n.Value)
		case "!!int":
			return "the integer " + n.Value
		case "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		}
		return n.Value
	}
	return "something else"
}

// fields walks a mapping node, reporting duplicate and unknown keys, and calls fn for each known key.
func (ps *parser) fields(n *yaml.Node, where string, known []string, fn func(key string, k, v *yaml.Node)) bool {
	if n.Kind != yaml.MappingNode {
		ps.add(n.Line, "%s must be a mapping, got %s", where, describe(n))
		return false
	}
	for _, e := range yamldoc.Fields(n, where, known, fn) {
		ps.add(e.Line, "%s", e.Msg)
	}
	return true
}

func (ps *parser) str(n *yaml.Node, where string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		ps.add(n.Line, "%s must be a string, got %s", where, describe(n))
		return "", false
	}
	return n.Value, true
}

func (ps *parser) int(n *yaml.Node, where string, min int64) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		ps.add(n.Line, "%s must be an integer, got %s", where, describe(n))
		return 0, false
	}
	var v int64
	if err := n.Decode(&v); err != nil {
		ps.add(n.Line, "%s: %s is not a valid integer", where, n.Value)
		return 0, false
	}
	if v < min {
		if min == 1 {
			ps.add(n.Line, "%s must be greater than 0, got %d", where, v)
		} else {
			ps.add(n.Line, "%s must be at least %d, got %d", where, min, v)
		}
		return 0, false
	}
	return v, true
}

func (ps *parser) bool(n *yaml.Node, where string) (bool, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		ps.add(n.Line, "%s must be true or false, got %s", where, describe(n))
		return false, false
	}
	var v bool
	if err := n.Decode(&v); err != nil {
		ps.add(n.Line, "%s must be true or false, got %s", where, n.Value)
		return false, false
	}
	return v, true
}

func (ps *parser) duration(n *yaml.Node, where string) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		ps.add(n.Line, "%s must be a duration such as 200ms or 5s, got %s", where, describe(n))
		return 0, false
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		ps.add(n.Line, "%s must be a duration such as 200ms or 5s, got %q", where, n.Value)
		return 0, false
	}
	if d < 0 {
		ps.add(n.Line, "%s must not be negative, got %s", where, n.Value)
		return 0, false
	}
	return d, true
}

var (
	tenantRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	toolNameRe = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
)

// maxTenantLen keeps tenant names usable as directory names and metric labels.
const maxTenantLen = 63

func (ps *parser) policy(n *yaml.Node, isDefault bool) *Policy {
	p := &Policy{
		Line:              n.Line,
		ContextManagement: ContextManagement{Mode: CMDefault, Threads: DefaultThreads},
		Memory: Memory{
			Mode:          MemoryOff,
			MaxIterations: DefaultMaxIterations,
			History:       memoryhook.DefaultRetention(),
			Limits:        memoryhook.DefaultLimits(),
		},
		Upstream: Upstream{RetryBaseDelay: DefaultRetryBaseDelay, RetryMaxDelay: DefaultRetryMaxDelay},
		Limits:   defaultLimits(),
	}
	if isNull(n) {
		ps.add(n.Line, "file is empty; a policy needs at least `tenant: NAME`")
		return p
	}
	var tenantSeen, keysSeen bool
	var keysLine int
	ok := ps.fields(n, "the policy", []string{"tenant", "api_keys_sha256", "operator_tokens_sha256", "context_management", "memory", "upstream", "limits", "tracing", "accounting", "shadow"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "tenant":
			tenantSeen = true
			p.Line = k.Line
			name, ok := ps.str(v, "tenant")
			if !ok {
				return
			}
			switch {
			case !tenantRe.MatchString(name):
				ps.add(v.Line, "tenant %q is not a valid name: use lowercase letters, digits and '-', starting with a letter or digit", name)
			case len(name) > maxTenantLen:
				ps.add(v.Line, "tenant %q is longer than %d characters", name, maxTenantLen)
			case isDefault && name != DefaultTenant:
				ps.add(v.Line, "default.yaml must be tenant %q, got %q", DefaultTenant, name)
			case !isDefault && name == DefaultTenant:
				ps.add(v.Line, "tenant %q is reserved for default.yaml", DefaultTenant)
			}
			p.Tenant = name
		case "api_keys_sha256":
			keysSeen = true
			keysLine = k.Line
			p.KeyHashes, p.keyLines = ps.keyHashes(v)
		case "operator_tokens_sha256":
			p.OperatorTokens, _ = ps.hashList(v, "operator_tokens_sha256", "operator token")
		case "context_management":
			ps.contextManagement(v, &p.ContextManagement)
		case "memory":
			ps.memory(v, &p.Memory, isDefault)
		case "upstream":
			ps.upstream(v, &p.Upstream)
		case "limits":
			ps.limits(v, &p.Limits)
		case "tracing":
			ps.tracing(v, &p.Tracing)
		case "accounting":
			ps.accounting(v, &p.Accounting)
		case "shadow":
			p.Shadow = ps.shadow(v)
			ps.shadowCandidates(p.Shadow)
		}
	})
	if !ok {
		return p
	}
	if !tenantSeen {
		if isDefault {
			ps.add(n.Line, "missing `tenant: default`")
		} else {
			ps.add(n.Line, "missing `tenant: NAME`")
		}
	}
	if isDefault && keysSeen && len(p.KeyHashes) > 0 {
		ps.add(keysLine, "default.yaml applies to clients that match no tenant and must not list api_keys_sha256")
	}
	return p
}

func (ps *parser) keyHashes(n *yaml.Node) (out [][32]byte, lines []int) {
	return ps.hashList(n, "api_keys_sha256", "API key")
}

// emptyHash is the sha256 of the empty string. A list never holds it: it would
// match a request without a credential.
var emptyHash = sha256.Sum256(nil)

// hashList reads a list of sha256 hex digests of secrets (what names the secret).
func (ps *parser) hashList(n *yaml.Node, field, what string) (out [][32]byte, lines []int) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		ps.add(n.Line, "%s must be a list of sha256 hex digests, got %s", field, describe(n))
		return nil, nil
	}
	seen := map[[32]byte]int{}
	for i, item := range n.Content {
		item = resolve(item)
		where := fmt.Sprintf("%s[%d]", field, i)
		s, ok := ps.str(item, where)
		if !ok {
			continue
		}
		var h [32]byte
		if len(s) != 64 {
			ps.add(item.Line, "%s must be 64 hex digits (the sha256 of the %s), got %d characters", where, what, len(s))
			continue
		}
		if _, err := hex.Decode(h[:], []byte(s)); err != nil {
			var bad hex.InvalidByteError
			if errors.As(err, &bad) {
				ps.add(item.Line, "%s must be hex digits only, found %q", where, rune(bad))
			} else {
				ps.add(item.Line, "%s is not hex: %v", where, err)
			}
			continue
		}
		if h == emptyHash {
			ps.add(item.Line, "%s is the sha256 of nothing, what `printf %%s \"$VAR\" | sha256sum` prints when the variable is unset or empty: "+
				"it would match a client that sends no %s; hash the %s itself", where, what, what)
			continue
		}
		if prev, dup := seen[h]; dup {
			ps.add(item.Line, "%s repeats the key hash at line %d", where, prev)
			continue
		}
		seen[h] = item.Line
		out = append(out, h)
		lines = append(lines, item.Line)
	}
	return out, lines
}

func (ps *parser) contextManagement(n *yaml.Node, cm *ContextManagement) {
	if isNull(n) {
		return
	}
	ps.fields(n, "context_management", []string{"mode", "clear_thinking", "clear_tool_uses", "compact", "threads"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "mode":
			s, ok := ps.str(v, "context_management.mode")
			if !ok {
				return
			}
			switch m := CMMode(s); m {
			case CMEnforce, CMDefault, CMOff:
				cm.Mode = m
			default:
				ps.add(v.Line, "context_management.mode must be enforce, default or off, got %q", s)
			}
		case "clear_thinking":
			if isNull(v) { // an emptied block (everything commented out) means "no edit"
				return
			}
			ct := &ClearThinking{}
			ps.fields(v, "context_management.clear_thinking", []string{"keep"}, func(_ string, _, kv *yaml.Node) {
				ct.Keep = ps.thinkingKeep(kv)
			})
			cm.ClearThinking = ct
		case "clear_tool_uses":
			if isNull(v) {
				return
			}
			cm.ClearToolUses = ps.clearToolUses(v)
		case "compact":
			if isNull(v) {
				return
			}
			cm.Compact = ps.compact(v)
		case "threads":
			s, ok := ps.str(v, "context_management.threads")
			if !ok {
				return
			}
			switch t := ThreadsMode(s); t {
			case ThreadsPass, ThreadsUnthreadEdits:
				cm.Threads = t
			default:
				ps.add(v.Line, "context_management.threads must be pass or unthread_edits, got %q", s)
			}
		}
	})
}

// compact reads context_management.compact: the rules are the API's for compact_20260112
// (trigger only input_tokens, at least 50,000), checked here so a bad policy fails at load
// rather than on every request.
func (ps *parser) compact(n *yaml.Node) *Compact {
	const where = "context_management.compact"
	c := &Compact{Models: DefaultCompactModels}
	ps.fields(n, where, []string{"trigger", "instructions", "pause_after_compaction", "models", "measure_savings"}, func(key string, _, v *yaml.Node) {
		w := where + "." + key
		switch key {
		case "trigger":
			c.Trigger = ps.threshold(v, w, []string{"input_tokens"}, MinCompactTrigger)
		case "instructions":
			if isNull(v) {
				return
			}
			s, ok := ps.str(v, w)
			if !ok {
				return
			}
			if strings.TrimSpace(s) == "" {
				// The API takes an empty prompt as none; say so rather than send it.
				ps.add(v.Line, "%s is empty; leave it out to use the API's summarization prompt", w)
				return
			}
			c.Instructions = &s
		case "pause_after_compaction":
			c.PauseAfterCompaction, _ = ps.bool(v, w)
		case "measure_savings":
			c.MeasureSavings, _ = ps.bool(v, w)
		case "models":
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				ps.add(v.Line, "%s must be a non-empty list of model names (each also names its dated snapshots), got %s", w, describe(v))
				return
			}
			var models []string
			for i, item := range v.Content {
				s, ok := ps.str(resolve(item), fmt.Sprintf("%s[%d]", w, i))
				if !ok {
					continue
				}
				if strings.TrimSpace(s) != s || s == "" {
					ps.add(item.Line, "%s[%d]: %q is not a model name", w, i, s)
					continue
				}
				models = append(models, s)
			}
			c.Models, c.ModelsListed = models, true
		}
	})
	return c
}

func (ps *parser) thinkingKeep(n *yaml.Node) *ThinkingKeep {
	const where = "context_management.clear_thinking.keep"
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		if n.Value == "all" {
			return &ThinkingKeep{All: true, AllString: true}
		}
		ps.add(n.Line, "%s must be all or {type: thinking_turns, value: N}, got %q", where, n.Value)
		return nil
	}
	if n.Kind != yaml.MappingNode {
		ps.add(n.Line, "%s must be all or {type: thinking_turns, value: N}, got %s", where, describe(n))
		return nil
	}
	var typ string
	var value *yaml.Node
	ps.fields(n, where, []string{"type", "value"}, func(key string, _, v *yaml.Node) {
		if key == "type" {
			typ, _ = ps.str(v, where+".type")
		} else {
			value = v
		}
	})
	switch typ {
	case "all":
		if value != nil {
			ps.add(value.Line, "%s: {type: all} takes no value", where)
		}
		return &ThinkingKeep{All: true}
	case "thinking_turns":
		if value == nil {
			ps.add(n.Line, "%s: thinking_turns needs a value (the number of recent assistant turns whose thinking is kept)", where)
			return nil
		}
		v, ok := ps.int(value, where+".value", 1)
		if !ok {
			return nil
		}
		return &ThinkingKeep{Turns: v}
	case "":
		ps.add(n.Line, "%s needs a type: thinking_turns or all", where)
	default:
		ps.add(n.Line, "%s.type must be thinking_turns or all, got %q", where, typ)
	}
	return nil
}

func (ps *parser) clearToolUses(n *yaml.Node) *ClearToolUses {
	const where = "context_management.clear_tool_uses"
	cu := &ClearToolUses{}
	ps.fields(n, where, []string{"trigger", "keep", "clear_at_least", "exclude_tools", "clear_tool_inputs"}, func(key string, _, v *yaml.Node) {
		w := where + "." + key
		switch key {
		case "trigger":
			cu.Trigger = ps.threshold(v, w, []string{"input_tokens", "tool_uses"}, 1)
		case "keep":
			cu.Keep = ps.threshold(v, w, []string{"tool_uses"}, 0)
		case "clear_at_least":
			if isNull(v) {
				return
			}
			cu.ClearAtLeast = ps.threshold(v, w, []string{"input_tokens"}, 0)
		case "exclude_tools":
			if isNull(v) {
				return
			}
			cu.ExcludeTools = ps.toolNames(v, w)
			if cu.ExcludeTools == nil {
				cu.ExcludeTools = []string{}
			}
		case "clear_tool_inputs":
			if isNull(v) {
				return
			}
			if v.Kind == yaml.SequenceNode {
				tools := ps.toolNames(v, w)
				if tools == nil {
					tools = []string{}
				}
				cu.ClearToolInputs = &ClearToolInputs{Tools: tools}
				return
			}
			if v.Kind == yaml.ScalarNode && v.Tag == "!!bool" {
				b, ok := ps.bool(v, w)
				if ok {
					cu.ClearToolInputs = &ClearToolInputs{All: b}
				}
				return
			}
			ps.add(v.Line, "%s must be true, false or a list of tool names, got %s", w, describe(v))
		}
	})
	return cu
}

func (ps *parser) threshold(n *yaml.Node, where string, types []string, min int64) *Threshold {
	if n.Kind != yaml.MappingNode {
		ps.add(n.Line, "%s must be {type: %s, value: N}, got %s", where, strings.Join(types, "|"), describe(n))
		return nil
	}
	t := &Threshold{}
	var typeNode, valueNode *yaml.Node
	ps.fields(n, where, []string{"type", "value"}, func(key string, _, v *yaml.Node) {
		if key == "type" {
			typeNode = v
		} else {
			valueNode = v
		}
	})
	ok := true
	switch {
	case typeNode != nil:
		s, sok := ps.str(typeNode, where+".type")
		switch {
		case !sok:
			ok = false
		case !slices.Contains(types, s):
			ps.add(typeNode.Line, "%s.type must be %s, got %q", where, orList(types), s)
			ok = false
		default:
			t.Type = s
		}
	case len(types) == 1:
		t.Type = types[0] // only one type is possible: the policy may leave it out
	default:
		ps.add(n.Line, "%s needs a type: %s", where, orList(types))
		ok = false
	}
	if valueNode == nil {
		ps.add(n.Line, "%s needs a value", where)
		return nil
	}
	v, vok := ps.int(valueNode, where+".value", min)
	if !ok || !vok {
		return nil
	}
	t.Value = v
	return t
}

func orList(s []string) string {
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

func (ps *parser) toolNames(n *yaml.Node, where string) []string {
	if n.Kind != yaml.SequenceNode {
		ps.add(n.Line, "%s must be a list of tool names, got %s", where, describe(n))
		return nil
	}
	var out []string
	for i, item := range n.Content {
		item = resolve(item)
		w := fmt.Sprintf("%s[%d]", where, i)
		s, ok := ps.str(item, w)
		if !ok {
			continue
		}
		if !toolNameRe.MatchString(s) {
			ps.add(item.Line, "%s: %q is not a valid tool name (1-128 of a-z, A-Z, 0-9, _ and -)", w, s)
			continue
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func (ps *parser) memory(n *yaml.Node, m *Memory, isDefault bool) {
	if isNull(n) {
		return
	}
	var scopesLine int
	ps.fields(n, "memory", []string{"mode", "max_iterations", "limits", "history", "scopes", "gate"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "scopes":
			scopesLine = k.Line
			m.Scopes = ps.scopes(v, filepath.Dir(ps.file), isDefault)
		case "gate":
			if scopesLine == 0 {
				scopesLine = k.Line
			}
			ps.gate(v, &m.Gate)
		case "history":
			ps.history(v, &m.History)
		case "mode":
			s, ok := ps.str(v, "memory.mode")
			if !ok {
				return
			}
			switch mm := MemoryMode(s); mm {
			case MemoryProxy, MemoryInject, MemoryOff:
				m.Mode = mm
			default:
				ps.add(v.Line, "memory.mode must be proxy, inject or off, got %q", s)
			}
		case "max_iterations":
			if x, ok := ps.int(v, "memory.max_iterations", 1); ok {
				m.MaxIterations = int(min(x, 1000))
				if x > 1000 {
					ps.add(v.Line, "memory.max_iterations must be at most 1000, got %d", x)
				}
			}
		case "limits":
			if isNull(v) {
				return
			}
			ps.fields(v, "memory.limits", []string{"max_file_bytes", "max_total_bytes", "max_files", "max_view_chars"}, func(key string, _, lv *yaml.Node) {
				x, ok := ps.int(lv, "memory.limits."+key, 1)
				if !ok {
					return
				}
				switch key {
				case "max_file_bytes":
					m.Limits.MaxFileBytes = x
				case "max_total_bytes":
					m.Limits.MaxTenantBytes = x
				case "max_files":
					m.Limits.MaxFiles = int(min(x, 1<<31-1))
				case "max_view_chars":
					m.Limits.MaxViewChars = int(min(x, 1<<31-1))
				}
			})
			if m.Limits.MaxFileBytes > m.Limits.MaxTenantBytes {
				ps.add(v.Line, "memory.limits.max_file_bytes (%d) is larger than max_total_bytes (%d)", m.Limits.MaxFileBytes, m.Limits.MaxTenantBytes)
			}
		}
	})
	if m.Mode == MemoryInject && scopesLine > 0 {
		// The client runs the calls in inject mode: the proxy could neither
		// route them to scopes nor gate them.
		ps.add(scopesLine, "memory.scopes and memory.gate need memory.mode proxy: in inject mode the client runs the memory calls")
	}
}

func (ps *parser) tracing(n *yaml.Node, t *Tracing) {
	if isNull(n) {
		return
	}
	ps.fields(n, "tracing", []string{"content"}, func(key string, _, v *yaml.Node) {
		if b, ok := ps.bool(v, "tracing.content"); ok {
			t.Content = b
		}
	})
}

func (ps *parser) accounting(n *yaml.Node, a *Accounting) {
	if isNull(n) {
		return
	}
	ps.fields(n, "accounting", []string{"cache_diagnostics"}, func(key string, _, v *yaml.Node) {
		if b, ok := ps.bool(v, "accounting.cache_diagnostics"); ok {
			a.CacheDiagnostics = &b
		}
	})
}

func (ps *parser) upstream(n *yaml.Node, u *Upstream) {
	if isNull(n) {
		return
	}
	ps.fields(n, "upstream", []string{"retries", "retry_base_delay", "retry_max_delay", "api_key_env", "api_key_file"}, func(key string, _, v *yaml.Node) {
		switch key {
		case "api_key_env", "api_key_file":
			ps.upstreamKeySource(key, v, u)
		case "retries":
			if x, ok := ps.int(v, "upstream.retries", 0); ok {
				if x > MaxRetries {
					ps.add(v.Line, "upstream.retries must be at most %d, got %d", MaxRetries, x)
					return
				}
				u.Retries = int(x)
			}
		case "retry_base_delay":
			if d, ok := ps.duration(v, "upstream.retry_base_delay"); ok {
				u.RetryBaseDelay = d
			}
		case "retry_max_delay":
			if d, ok := ps.duration(v, "upstream.retry_max_delay"); ok {
				u.RetryMaxDelay = d
			}
		}
	})
	if u.RetryBaseDelay > u.RetryMaxDelay {
		ps.add(n.Line, "upstream.retry_base_delay (%s) is longer than retry_max_delay (%s)", u.RetryBaseDelay, u.RetryMaxDelay)
	}
}

// render pre-computes the JSON of the tenant's edits so Rewrite only splices bytes.
func (p *Policy) render() error {
	cm := p.ContextManagement
	if ct := cm.ClearThinking; ct != nil {
		b := []byte(`{"type":"` + EditClearThinking + `"`)
		if k := ct.Keep; k != nil {
			switch {
			case k.All && k.AllString:
				b = append(b, `,"keep":"all"`...)
			case k.All:
				b = append(b, `,"keep":{"type":"all"}`...)
			default:
				b = append(b, `,"keep":{"type":"thinking_turns","value":`...)
				b = strconv.AppendInt(b, k.Turns, 10)
				b = append(b, '}')
			}
		}
		p.clearThinkingJSON = append(b, '}')
	}
	if cu := cm.ClearToolUses; cu != nil {
		b := []byte(`{"type":"` + EditClearToolUses + `"`)
		th := func(name string, t *Threshold) {
			if t == nil {
				return
			}
			b = append(b, `,"`+name+`":{"type":"`+t.Type+`","value":`...)
			b = strconv.AppendInt(b, t.Value, 10)
			b = append(b, '}')
		}
		th("trigger", cu.Trigger)
		th("keep", cu.Keep)
		th("clear_at_least", cu.ClearAtLeast)
		exclude := cu.ExcludeTools
		if p.MemoryOn() && !slices.Contains(exclude, MemoryToolName) {
			exclude = append(append([]string(nil), exclude...), MemoryToolName)
		}
		if exclude != nil {
			js, err := json.Marshal(exclude)
			if err != nil {
				return fmt.Errorf("render exclude_tools: %w", err)
			}
			b = append(b, `,"exclude_tools":`...)
			b = append(b, js...)
		}
		if ci := cu.ClearToolInputs; ci != nil {
			b = append(b, `,"clear_tool_inputs":`...)
			if ci.Tools != nil {
				js, err := json.Marshal(ci.Tools)
				if err != nil {
					return fmt.Errorf("render clear_tool_inputs: %w", err)
				}
				b = append(b, js...)
			} else {
				b = strconv.AppendBool(b, ci.All)
			}
		}
		p.clearToolUsesJSON = append(b, '}')
	}
	if c := cm.Compact; c != nil {
		b := []byte(`{"type":"` + EditCompact + `"`)
		if t := c.Trigger; t != nil {
			b = append(b, `,"trigger":{"type":"input_tokens","value":`...)
			b = strconv.AppendInt(b, t.Value, 10)
			b = append(b, '}')
		}
		if c.Instructions != nil {
			b = append(b, `,"instructions":`...)
			b = jsonstr.Append(b, *c.Instructions)
		}
		p.compactJSON = append(append([]byte(nil), b...), `,"pause_after_compaction":false}`...)
		if c.PauseAfterCompaction {
			p.compactPauseJSON = append(b, `,"pause_after_compaction":true}`...)
		}
	}
	for i, thinking := range []bool{false, true} {
		for j, toolUses := range []bool{false, true} {
			for k, compact := range [][]byte{nil, p.compactJSON, p.compactPauseJSON} {
				if k > 0 && compact == nil {
					continue
				}
				p.tenant[i][j][k] = p.renderEdits(thinking, toolUses, compact)
			}
		}
	}
	return nil
}

// renderEdits is the tenant's edits: clear_thinking when thinking, clear_tool_uses when toolUses,
// and compact (nil: none) last.
func (p *Policy) renderEdits(thinking, toolUses bool, compact []byte) tenantEdits {
	var te tenantEdits
	if thinking && p.clearThinkingJSON != nil {
		te.edits = append(te.edits, clientEdit{typ: EditClearThinking, raw: string(p.clearThinkingJSON)})
	}
	if toolUses && p.clearToolUsesJSON != nil {
		te.edits = append(te.edits, clientEdit{typ: EditClearToolUses, raw: string(p.clearToolUsesJSON)})
	}
	if compact != nil {
		te.edits = append(te.edits, clientEdit{typ: EditCompact, raw: string(compact)})
	}
	if len(te.edits) > 0 {
		te.array = "[" + te.edits[0].raw
		for _, e := range te.edits[1:] {
			te.array += "," + e.raw
		}
		te.array += "]"
	}
	for _, e := range te.edits {
		te.types = append(te.types, e.typ)
	}
	te.types = te.types[:len(te.types):len(te.types)]
	return te
}
