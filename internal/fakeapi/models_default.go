package fakeapi

// DefaultModels is the model table a fake serves unless Options.Models
// replaces it (a fresh copy per call). Ids are the pinned SDKs' model list
// (TypeScript 1.17.0); dates, limits and capabilities are invented but
// plausible, chosen so the table holds each case a reader must handle:
//   - claude-haiku-5-5 has no compact_20260112, no xhigh or max effort and
//     no between_tools; claude-haiku-4-5 has no context management
//     strategy entries at all (null: unknown) and no adaptive thinking;
//   - claude-opus-4-5 is deprecated with a retirement date ahead,
//     claude-sonnet-4-0 deprecated and overdue (its date is past),
//     claude-mythos-preview and claude-opus-4-1 are retired (requests naming
//     them are refused);
//   - dated snapshots answer to their alias (claude-opus-4-5 is
//     claude-opus-4-5-20251101).
//
// claude-sonnet-4-5, which the real API has retired, is left out on purpose:
// the many tests written against it keep a model the fake takes as it comes,
// as it does every model the table does not know.
func DefaultModels() []Model {
	return []Model{
		model("claude-fable-5-2", "Claude Fable 5.2", "2026-11-18", "fable", 1_000_000, 128_000, fullCaps(), "beta"),
		model("claude-mythos-5-2", "Claude Mythos 5.2", "2026-11-18", "mythos", 1_000_000, 128_000, fullCaps(), "beta"),
		model("claude-sonnet-5-5", "Claude Sonnet 5.5", "2026-10-28", "sonnet", 1_000_000, 128_000, fullCaps(), ""),
		model("claude-haiku-5-5", "Claude Haiku 5.5", "2026-10-28", "haiku", 400_000, 64_000, haiku55Caps(), ""),
		model("claude-opus-5-5", "Claude Opus 5.5", "2026-09-16", "opus", 1_000_000, 128_000, fullCaps(), "beta"),
		model("claude-fable-5-1", "Claude Fable 5.1", "2026-09-16", "fable", 1_000_000, 128_000, fullCaps(), ""),
		model("claude-mythos-5-1", "Claude Mythos 5.1", "2026-09-16", "mythos", 1_000_000, 128_000, fullCaps(), ""),
		model("claude-sonnet-5", "Claude Sonnet 5", "2026-07-22", "sonnet", 1_000_000, 64_000, fullCaps(), ""),
		model("claude-opus-5", "Claude Opus 5", "2026-07-22", "opus", 1_000_000, 128_000, fullCaps(), "ga"),
		model("claude-fable-5", "Claude Fable 5", "2026-07-22", "fable", 1_000_000, 128_000, fullCaps(), ""),
		model("claude-mythos-5", "Claude Mythos 5", "2026-07-22", "mythos", 1_000_000, 128_000, fullCaps(), ""),
		model("claude-opus-4-8", "Claude Opus 4.8", "2026-06-01", "opus", 1_000_000, 128_000, fullCaps(), "ga"),
		model("claude-opus-4-7", "Claude Opus 4.7", "2026-04-16", "opus", 1_000_000, 128_000, noBetweenTools(fullCaps()), ""),
		retired(model("claude-mythos-preview", "Claude Mythos Preview", "2026-04-07", "mythos", 1_000_000, 128_000,
			noBetweenTools(fullCaps()), ""), "2026-05-01", "2026-06-30"),
		model("claude-sonnet-4-6", "Claude Sonnet 4.6", "2026-02-17", "sonnet", 1_000_000, 64_000, noBetweenTools(fullCaps()), ""),
		model("claude-opus-4-6", "Claude Opus 4.6", "2026-02-05", "opus", 1_000_000, 128_000, noBetweenTools(fullCaps()), "beta"),
		deprecated(model("claude-opus-4-5-20251101", "Claude Opus 4.5", "2025-11-24", "opus", 200_000, 64_000,
			olderCaps(true), "", "claude-opus-4-5"), "2026-10-22", "2027-01-22"),
		model("claude-haiku-4-5-20251001", "Claude Haiku 4.5", "2025-10-15", "haiku", 200_000, 64_000, haiku45Caps(), "", "claude-haiku-4-5"),
		deprecated(model("claude-sonnet-4-20250514", "Claude Sonnet 4", "2025-05-22", "sonnet", 200_000, 64_000,
			olderCaps(false), "", "claude-sonnet-4-0"), "2026-04-14", "2026-10-14"),
		retired(model("claude-opus-4-1-20250805", "Claude Opus 4.1", "2025-08-05", "opus", 200_000, 32_000,
			olderCaps(false), "", "claude-opus-4-1"), "2026-03-04", "2026-09-04"),
	}
}

func model(id, name, date, line string, maxIn, maxOut int64, c *Capabilities, fast string, aliases ...string) Model {
	return Model{ID: id, DisplayName: name, CreatedAt: date + "T00:00:00Z", Lifecycle: LifecycleActive, Line: line,
		MaxInputTokens: maxIn, MaxTokens: maxOut, AllowedFallbackModels: []string{}, Capabilities: c,
		FastMode: fast, Aliases: aliases}
}

func deprecated(m Model, at, retires string) Model {
	m.Lifecycle, m.DeprecatedAt, m.RetiresAt = LifecycleDeprecated, at+"T00:00:00Z", retires+"T00:00:00Z"
	return m
}

func retired(m Model, deprecatedAt, retiredAt string) Model {
	m = deprecated(m, deprecatedAt, retiredAt)
	m.Lifecycle = LifecycleRetired
	return m
}

var (
	yes = Support{Supported: true}
	no  = Support{}
)

func ptr(s Support) *Support { return &s }

// fullCaps is a December 2026 frontier model: everything supported.
func fullCaps() *Capabilities {
	return &Capabilities{
		Batch: yes, Citations: yes, CodeExecution: yes,
		Compaction: &CompactionCapability{Supported: true, Summarize: yes},
		ContextManagement: ContextManagementCapability{Supported: true,
			ClearThinking: ptr(yes), ClearToolUses: ptr(yes), Compact: ptr(yes)},
		Effort:            EffortCapability{Supported: true, Low: yes, Medium: yes, High: yes, Max: yes, XHigh: ptr(yes)},
		ImageInput:        yes,
		PDFInput:          yes,
		ServerTools:       ServerToolsCapability{Supported: true, WebSearch: yes, CodeExecution: yes},
		StructuredOutputs: yes,
		Thinking: ThinkingCapability{Supported: true,
			Types: ThinkingTypes{Enabled: yes, Adaptive: yes, Disabled: yes, BetweenTools: yes}},
	}
}

func noBetweenTools(c *Capabilities) *Capabilities {
	c.Thinking.Types.BetweenTools = no
	c.Effort.XHigh = ptr(no)
	return c
}

func haiku55Caps() *Capabilities {
	c := noBetweenTools(fullCaps())
	c.Compaction = &CompactionCapability{}
	c.ContextManagement.Compact = ptr(no)
	c.Effort.Max = no
	return c
}

// olderCaps is a 4.5-era model: enabled thinking only, no compaction, effort
// only on Opus.
func olderCaps(effort bool) *Capabilities {
	c := noBetweenTools(fullCaps())
	c.Thinking.Types.Adaptive = no
	c.Compaction = &CompactionCapability{}
	c.ContextManagement.Compact = ptr(no)
	c.Effort = EffortCapability{XHigh: ptr(no)}
	if effort {
		c.Effort = EffortCapability{Supported: true, Low: yes, Medium: yes, High: yes, XHigh: ptr(no)}
	}
	return c
}

func haiku45Caps() *Capabilities {
	c := olderCaps(false)
	c.ContextManagement = ContextManagementCapability{Supported: true}
	return c
}
