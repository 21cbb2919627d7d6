package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/machine"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
)

// cellKey names one ledger measurement series.
type cellKey struct {
	config int // index in options.configs
	size   int
}

// results holds every round's measurements.
type results struct {
	plainGrouped map[int][]result // by size, every grouped plain run
	// plainBracket is, per configuration and size, each round's two
	// grouped plain runs around the throughput run (the last one before it
	// and the one right after it) as one result: their mean throughput. The disk
	// slows down as a run writes (docs/benchmarks.md, "Machine limits": it
	// bursts, then settles), so
	// a plain run taken only before the ledger runs favoured the plain
	// file.
	plainBracket map[cellKey][]result
	plainSingle  map[int][]result
	tput         map[cellKey][]result
	lat          map[cellKey][]result
	plainLat     map[cellKey][]result // plainAtRate at the same offered rate as lat
	before       machine.Load
	after        machine.Load
	started      time.Time
}

// run executes the benchmark and writes the report to out; progress goes
// to progress.
func run(ctx context.Context, o options, out, progress io.Writer) error {
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	// Every round's bookie directories are removed when the run ends, not
	// when the round does: deleting gigabytes between rounds had the next
	// round's first runs measured on a disk busy freeing (and, mounted with
	// discard, trimming) them, with 100-200 ms stalls.
	// The plain files too: deleting one right after its run stalled the
	// next configuration's fdatasyncs the same way.
	plainDir := filepath.Join(o.dir, "ledgerbench-plain")
	if err := os.MkdirAll(plainDir, 0o755); err != nil {
		return err
	}
	o.plainDir = plainDir
	defer func() {
		os.RemoveAll(plainDir)
		dirs, _ := filepath.Glob(filepath.Join(o.dir, "ledgerbench-round*"))
		for _, d := range dirs {
			os.RemoveAll(d)
		}
	}()
	res := &results{
		plainGrouped: map[int][]result{},
		plainBracket: map[cellKey][]result{},
		plainSingle:  map[int][]result{},
		tput:         map[cellKey][]result{},
		lat:          map[cellKey][]result{},
		plainLat:     map[cellKey][]result{},
		before:       machine.Snapshot(),
		started:      time.Now(),
	}
	for r := range o.rounds {
		if err := runRound(ctx, o, r, res, progress); err != nil {
			return fmt.Errorf("round %d: %w", r+1, err)
		}
	}
	res.after = machine.Snapshot()
	rep := buildReport(o, res)
	if o.markdown {
		rep.writeMarkdown(out, o, res)
	} else {
		rep.writeText(out, o)
	}
	return nil
}

func runRound(ctx context.Context, o options, round int, res *results, progress io.Writer) (err error) {
	clusters := make([]*cluster, len(o.configs))
	defer func() {
		for _, c := range clusters {
			if c != nil {
				if cerr := c.close(); err == nil {
					err = cerr
				}
			}
		}
	}()
	for i, q := range o.configs {
		dir := filepath.Join(o.dir, fmt.Sprintf("ledgerbench-round%d-config%d", round+1, i+1))
		if clusters[i], err = startCluster(ctx, dir, q.bookies, storage.Config{CopyToEntryLogs: q.copyToEntryLogs, JournalBufferedWrites: o.bufferedJournal}); err != nil {
			return fmt.Errorf("start %d bookies: %w", q.bookies, err)
		}
	}
	quiesce := func() error {
		for _, c := range clusters {
			if err := c.quiesce(); err != nil {
				return fmt.Errorf("quiesce: %w", err)
			}
		}
		return nil
	}
	// grouped runs the grouped plain baseline at size on a quiesced disk.
	grouped := func(size int) (result, error) {
		if err := quiesce(); err != nil {
			return result{}, err
		}
		g, err := plainGrouped(o.plainDir, size, o.groupBytes, o.warmup, o.plainDuration)
		if err != nil {
			return result{}, fmt.Errorf("plain grouped: %w", err)
		}
		res.plainGrouped[size] = append(res.plainGrouped[size], g)
		return g, nil
	}
	for _, size := range o.sizes {
		g, err := grouped(size)
		if err != nil {
			return err
		}
		s, err := plainSingle(o.plainDir, size, o.warmup, o.plainDuration)
		if err != nil {
			return fmt.Errorf("plain single: %w", err)
		}
		res.plainSingle[size] = append(res.plainSingle[size], s)
		fmt.Fprintf(progress, "round %d  plain         %6s  grouped %8.1f MB/s %9.0f e/s | single %7.0f e/s p99 %v\n",
			round+1, sizeName(size), g.mbPerSec(), g.entriesPerSec(), s.entriesPerSec(), s.hist.Quantile(0.99))

		before := g
		for i, q := range o.configs {
			k := cellKey{i, size}
			if err := quiesce(); err != nil {
				return err
			}
			t, err := closedLoop(ctx, clusters[i].client, q, size, o.inflightFor(size), o.warmup, o.duration)
			if err != nil {
				return fmt.Errorf("%s %s max throughput: %w", q.name, sizeName(size), err)
			}
			res.tput[k] = append(res.tput[k], t)
			after, err := grouped(size)
			if err != nil {
				return err
			}
			res.plainBracket[k] = append(res.plainBracket[k], meanOf(before, after))
			fmt.Fprintf(progress, "round %d  plain after   %6s  grouped %8.1f MB/s (before %.1f)\n",
				round+1, sizeName(size), after.mbPerSec(), before.mbPerSec())
			before = after
			rate := o.loadFraction * t.entriesPerSec()
			if err := quiesce(); err != nil {
				return err
			}
			var worst *worstTracker
			var smp *storageSampler
			if o.timeline {
				worst, smp = new(worstTracker), startStorageSampler(clusters[i].reg)
			}
			stopTrace := startTrace(o.tracePath)
			l, err := openLoop(ctx, clusters[i].client, q, size, rate, o.warmup, o.latDuration, worst)
			stopTrace()
			samples := smp.finish()
			if err != nil {
				return fmt.Errorf("%s %s latency at %.0f/s: %w", q.name, sizeName(size), rate, err)
			}
			res.lat[k] = append(res.lat[k], l)
			if err := quiesce(); err != nil {
				return err
			}
			pl, err := plainAtRate(o.plainDir, size, rate, o.warmup, o.latDuration)
			if err != nil {
				return fmt.Errorf("plain at %.0f/s: %w", rate, err)
			}
			res.plainLat[k] = append(res.plainLat[k], pl)
			fmt.Fprintf(progress, "round %d  %s %6s  max %8.1f MB/s %9.0f e/s | at %7.0f e/s p50 %v p99 %v p99.9 %v | plain at that rate p50 %v p99 %v\n",
				round+1, q.name, sizeName(size), t.mbPerSec(), t.entriesPerSec(), rate,
				l.hist.Quantile(0.5), l.hist.Quantile(0.99), l.hist.Quantile(0.999),
				pl.hist.Quantile(0.5), pl.hist.Quantile(0.99))
			if o.timeline {
				printTimeline(progress, worst.buckets(), samples, o.warmup)
			}
		}
	}
	return nil
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
