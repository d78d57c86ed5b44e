package bench

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// fmtNum prints a figure with about four significant digits.
func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func fmtPtr(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmtNum(*v)
}

func fmtPass(p *bool) string {
	switch {
	case p == nil:
		return "—"
	case *p:
		return "pass"
	default:
		return "**FAIL**"
	}
}

// section groups rows for the Markdown report.
func section(r Row) string {
	switch {
	case strings.HasPrefix(r.Name, "roundtrip/"):
		return "Round trip"
	case strings.HasPrefix(r.Name, "paused/"):
		return "Paused conversations"
	case strings.HasPrefix(r.Name, "reconcile/"):
		return "Reconcile (toolgate only)"
	case strings.HasPrefix(r.Name, "long/"), strings.HasPrefix(r.Name, "large/"):
		return "Long conversations (toolgate only)"
	case strings.HasPrefix(r.Name, "codec/"):
		return "Codec (raw = JSON, toolgate = msgpack)"
	}
	return "Other"
}

// WriteMarkdown writes the results as Markdown tables.
func WriteMarkdown(w io.Writer, r *Results) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# toolgate benchmark results (%s mode, %s connections)\n\n", r.Mode, r.transport())
	fmt.Fprintf(&b, "%s, %.0f s; %s %s/%s, %d CPUs (GOMAXPROCS %d). ",
		r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Seconds, r.Host.GoVersion, r.Host.OS, r.Host.Arch,
		r.Host.CPUs, r.Host.GOMAXPROCS)
	fmt.Fprintf(&b, "In-flight window %d calls, %d measured calls per round-trip case after %d warm-up calls. "+
		"See bench/README.md for what each figure means.\n\n", r.Window, r.Calls, r.Warmup)
	if r.Note != "" {
		fmt.Fprintf(&b, "**Note:** %s\n\n", r.Note)
	}
	if len(r.Errors) > 0 {
		b.WriteString("Not measured:\n\n")
		for _, name := range sortedKeys(r.Errors) {
			fmt.Fprintf(&b, "- %s: %s\n", name, r.Errors[name])
		}
		b.WriteString("\n")
	}
	if len(r.Unreliable) > 0 {
		b.WriteString("Distorted (re-measure before reading their ratios):\n\n")
		for _, name := range sortedKeys(r.Unreliable) {
			fmt.Fprintf(&b, "- %s: %s\n", name, r.Unreliable[name])
		}
		b.WriteString("\n")
	}
	if len(r.Remeasured) > 0 {
		b.WriteString("Measured again after a stall (the figures are of the attempt without one):\n\n")
		for _, name := range sortedKeys(r.Remeasured) {
			fmt.Fprintf(&b, "- %s: %s\n", name, r.Remeasured[name])
		}
		b.WriteString("\n")
	}
	current := ""
	for i, row := range r.Cases {
		if s := section(row); s != current {
			current = s
			fmt.Fprintf(&b, "## %s\n\n", s)
			b.WriteString("| name | metric | workers | batch | raw | toolgate | ratio | core NATS | storage floor | target | result |\n")
			b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n")
		}
		target := row.Target
		if target == "" {
			target = "—"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s | %s | %s | %s | %s | %s |\n",
			row.Name, row.Metric, row.Workers, row.Batch, fmtPtr(row.Raw), fmtPtr(row.Toolgate),
			fmtPtr(row.Ratio), fmtPtr(row.Floor), fmtPtr(row.Storage), target, fmtPass(row.Pass))
		if i == len(r.Cases)-1 || section(r.Cases[i+1]) != current {
			b.WriteString("\n")
		}
	}
	b.WriteString("\n## Regressions\n\n")
	switch {
	case r.Previous == "":
		b.WriteString("No previous results to compare with.\n")
	case len(r.Regressions) == 0:
		fmt.Fprintf(&b, "None beyond %.0f %% against %s.\n", 100*RegressionThreshold, r.Previous)
	default:
		fmt.Fprintf(&b, "Worse by more than %.0f %% than %s:\n\n", 100*RegressionThreshold, r.Previous)
		for _, g := range r.Regressions {
			fmt.Fprintf(&b, "- %s\n", g)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
