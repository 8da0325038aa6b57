package tracing

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The OTEL_* variables the SDK's TracerProvider would read, read here as
// the SDK reads them (the specification's defaults; a value that does not
// parse is reported and its default used).

// samplerFromEnv is OTEL_TRACES_SAMPLER[_ARG]'s sampler, default
// parentbased_always_on: an agent's own sampled trace continues here.
func samplerFromEnv(getenv Getenv) sdktrace.Sampler {
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample())
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio(arg))
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio(arg)))
	}
	otel.Handle(fmt.Errorf("tracing: OTEL_TRACES_SAMPLER %q is not supported; using parentbased_always_on", name))
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// ratio is OTEL_TRACES_SAMPLER_ARG as a trace ID ratio, 1 when absent or not one.
func ratio(arg string) float64 {
	if arg == "" {
		return 1
	}
	v, err := strconv.ParseFloat(arg, 64)
	if err == nil && (v < 0 || v > 1) {
		err = errors.New("not within [0, 1]")
	}
	if err != nil {
		otel.Handle(fmt.Errorf("tracing: OTEL_TRACES_SAMPLER_ARG %q: %w; using 1.0", arg, err))
		return 1
	}
	return v
}

// batchFromEnv is OTEL_BSP_*.
func batchFromEnv(getenv Getenv) batchConfig {
	c := batchConfig{
		delay:    time.Duration(envInt(getenv, 5000, "OTEL_BSP_SCHEDULE_DELAY")) * time.Millisecond,
		timeout:  time.Duration(envInt(getenv, 30000, "OTEL_BSP_EXPORT_TIMEOUT")) * time.Millisecond,
		maxQueue: envInt(getenv, 2048, "OTEL_BSP_MAX_QUEUE_SIZE"),
		maxOut:   envInt(getenv, 512, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
	}
	if c.delay <= 0 {
		c.delay = 5 * time.Second
	}
	if c.timeout <= 0 {
		c.timeout = 30 * time.Second
	}
	if c.maxQueue <= 0 {
		c.maxQueue = 2048
	}
	if c.maxOut <= 0 || c.maxOut > c.maxQueue {
		c.maxOut = min(512, c.maxQueue)
	}
	return c
}

// spanLimits are OTEL_[SPAN_]ATTRIBUTE_COUNT_LIMIT and
// OTEL_[SPAN_]ATTRIBUTE_VALUE_LENGTH_LIMIT; a negative limit is none.
type spanLimits struct{ count, valueLength int }

func limitsFromEnv(getenv Getenv) spanLimits {
	return spanLimits{
		count:       envInt(getenv, 128, "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT"),
		valueLength: envInt(getenv, -1, "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"),
	}
}

// truncate is v with its strings cut to valueLength characters (the SDK
// also cuts a byte slice's and the values nested in slices and maps; a
// span here has none of those).
func (l spanLimits) truncate(v attribute.Value) attribute.Value {
	switch v.Type() {
	case attribute.STRING:
		if s := v.AsString(); len(s) > l.valueLength {
			return attribute.StringValue(truncate(s, l.valueLength))
		}
	case attribute.STRINGSLICE:
		ss := v.AsStringSlice() // a copy
		for j, s := range ss {
			ss[j] = truncate(s, l.valueLength)
		}
		return attribute.StringSliceValue(ss)
	}
	return v
}

// truncate is s cut to n characters.
func truncate(s string, n int) string {
	count := 0
	for i := range s {
		if count == n {
			return s[:i]
		}
		count++
	}
	return s
}

// envInt is the first of keys that is set, as an integer; def when none is
// or when it does not parse.
func envInt(getenv Getenv, def int, keys ...string) int {
	for _, k := range keys {
		v := strings.TrimSpace(getenv(k))
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			otel.Handle(fmt.Errorf("tracing: %s %q is not a number; using %d", k, v, def))
			return def
		}
		return n
	}
	return def
}
