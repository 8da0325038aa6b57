// Package modelid decides which model a table entry names. It is the one model matcher of
// ctxproxy's production code: the price table, the metrics' model labels and the policy's model
// lists (compact.models) all match through it, so they can never disagree about a model.
//
// An entry names its own model and that model's dated snapshots, and nothing else:
// claude-sonnet-4-5 names claude-sonnet-4-5, claude-sonnet-4-5-20250929 and the Vertex spelling
// claude-sonnet-4-5@20250929, but never claude-sonnet-4-50 or claude-sonnet-4-5-1, another model
// whose id merely starts with it (claude-opus-5 is not claude-opus-5-5).
package modelid

// dateLen is the length of a snapshot date, YYYYMMDD.
const dateLen = 8

// Base is the model a dated snapshot id belongs to (claude-sonnet-4-5-20250929 and
// claude-sonnet-4-5@20250929 → claude-sonnet-4-5), or id itself when it is not one.
func Base(id string) string {
	n := len(id) - dateLen - 1
	if n <= 0 || (id[n] != '-' && id[n] != '@') {
		return id
	}
	for i := n + 1; i < len(id); i++ {
		if id[i] < '0' || id[i] > '9' {
			return id
		}
	}
	return id[:n]
}

// Matches reports whether id is model or one of its dated snapshots.
func Matches(id, model string) bool {
	return id != "" && (id == model || Base(id) == model)
}

// Any reports whether id matches one of models.
func Any(id string, models []string) bool {
	for _, m := range models {
		if Matches(id, m) {
			return true
		}
	}
	return false
}
