package main

import (
	"fmt"
	"slices"
	"strings"
)

// The exec trace's cost: agentfs (traced, the default) over
// agentfs-untraced (mounted with --trace=false), workload by workload,
// in the same interleaved run. The issue allows the trace 5% of a
// traced workload.

// traceCost is that comparison, in results.json.
type traceCost struct {
	// Ratios are agentfs's median over agentfs-untraced's, by workload
	// name, for the workloads both ran.
	Ratios map[string]float64 `json:"ratios"`
	// Median is the median of Ratios; Highest the highest, of the
	// workload HighestWorkload.
	Median          float64 `json:"median"`
	Highest         float64 `json:"highest"`
	HighestWorkload string  `json:"highest_workload"`
	// Traced is what agentfs status said of the trace in agentfs's
	// test mount ("on: ..." or "off: why").
	Traced string `json:"traced,omitempty"`
}

// finishTraceCost computes r.TraceCost from the workloads' medians
// (finish computes them first), or leaves it nil when agentfs and
// agentfs-untraced did not both run.
func (r *report) finishTraceCost() {
	c := r.variantCost(fsAgentfsUntraced)
	if c == nil {
		return
	}
	for _, st := range r.Filesystems {
		if st.Name == fsAgentfs {
			c.Traced = st.Trace
		}
	}
	r.TraceCost = c
}

// finishHashCost computes r.HashCost: agentfs (hash worker on) over
// agentfs-nohash (--hash=false), nil when they did not both run.
func (r *report) finishHashCost() { r.HashCost = r.variantCost(fsAgentfsNohash) }

// variantCost is agentfs's median over other's, workload by workload,
// for the workloads both ran; nil when none.
func (r *report) variantCost(other string) *traceCost {
	order := r.order()
	if !slices.Contains(order, fsAgentfs) || !slices.Contains(order, other) {
		return nil
	}
	c := &traceCost{Ratios: map[string]float64{}}
	var ratios []float64
	for _, w := range r.Workloads {
		on, off := w.Results[fsAgentfs], w.Results[other]
		if w.Skipped != "" || on == nil || off == nil || on.Median == nil || off.Median == nil ||
			on.Error != "" || off.Error != "" {
			continue
		}
		q, ok := ratio(*on.Median, *off.Median)
		if !ok {
			continue
		}
		c.Ratios[w.Name] = q
		ratios = append(ratios, q)
		if c.HighestWorkload == "" || q > c.Highest {
			c.Highest, c.HighestWorkload = q, w.Name
		}
	}
	if len(ratios) == 0 {
		return nil
	}
	c.Median = median(ratios)
	return c
}

// hashMarkdown renders the hash worker's cost as one paragraph under
// the first table.
func (r *report) hashMarkdown(b *strings.Builder) {
	c := r.HashCost
	if c == nil {
		return
	}
	b.WriteString("\nHash worker: agentfs (content hashes and roots computed in the background after the snapshot taken at mount, the default) / agentfs-nohash (`--hash=false`), same run: ")
	r.ratiosMarkdown(b, c)
}

// ratiosMarkdown writes c's ratios, their median and the highest.
func (r *report) ratiosMarkdown(b *strings.Builder, c *traceCost) {
	var parts []string
	for _, w := range r.Workloads {
		if q, ok := c.Ratios[w.Name]; ok {
			parts = append(parts, w.Name+" "+formatRatio(q))
		}
	}
	fmt.Fprintf(b, "%s; median %s, highest %s (%s).\n", strings.Join(parts, ", "), formatRatio(c.Median), formatRatio(c.Highest), c.HighestWorkload)
}

// traceMarkdown renders the trace's cost as one paragraph under the
// first table: each workload's ratio, their median and the highest.
func (r *report) traceMarkdown(b *strings.Builder) {
	c := r.TraceCost
	if c == nil {
		return
	}
	b.WriteString("\nExec trace: agentfs (traced, the default) / agentfs-untraced (`--trace=false`), same run: ")
	if c.Traced != "" && !strings.HasPrefix(c.Traced, "on") {
		// Both ran untraced: the ratios say nothing of the trace.
		fmt.Fprintf(b, "the trace did not run in agentfs's mount (%s), so the two columns differ in nothing.\n", c.Traced)
		return
	}
	r.ratiosMarkdown(b, c)
}
