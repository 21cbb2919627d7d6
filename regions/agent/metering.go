package agent

// Usage metering (billing): every MeteringInterval the metering loop reads
// the usage counters of every broker of every ready cluster
// (pulsaradmin.Client.Usage), folds them into hourly totals
// (billing.Rollup), writes the roll-up to MeteringDir/usage.json (write,
// fsync, rename, fsync the directory) and only then sends the totals that
// changed to the control plane (Billing.IngestUsageRecords), marking them
// acknowledged and writing the file again. The order makes every step safe
// to cut short by a crash: a scrape not yet written is read again from the
// same cursors; a total written but not acknowledged is sent again, and the
// control plane drops a revision it already holds. While the control plane
// is unreachable the totals wait in the file.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/billing"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
	"github.com/magnetar-dev/magnetar/regions/pulsaradmin"
)

// DefaultMeteringInterval is the default Config.MeteringInterval.
const DefaultMeteringInterval = time.Minute

// usageBatch is how many records one IngestUsageRecords call carries.
const usageBatch = 500

// usageKeep is how long acknowledged totals stay in the file.
const usageKeep = 48 * time.Hour

// usageFile is the roll-up's file name under MeteringDir.
const usageFile = "usage.json"

// meteringTarget is one ready cluster to scrape.
type meteringTarget struct {
	name    string
	size    provisioner.Size
	brokers []string // admin URLs, one per broker
}

// meter owns the metering state; used by the metering goroutine only.
type meter struct {
	a       *Agent
	dir     string
	rollup  *billing.Rollup
	clients map[string]*pulsaradmin.Client
	hc      *http.Client
}

func (a *Agent) newMeter() (*meter, error) {
	if err := os.MkdirAll(a.cfg.MeteringDir, 0o700); err != nil {
		return nil, fmt.Errorf("agent: metering: %w", err)
	}
	m := &meter{a: a, dir: a.cfg.MeteringDir, rollup: billing.NewRollup(), clients: map[string]*pulsaradmin.Client{},
		hc: &http.Client{Timeout: pulsaradmin.DefaultTimeout, Transport: a.adminTransport}}
	raw, err := os.ReadFile(filepath.Join(m.dir, usageFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("agent: metering: %w", err)
	default:
		if m.rollup, err = billing.UnmarshalRollup(raw); err != nil {
			return nil, fmt.Errorf("agent: metering: %s: %w", filepath.Join(m.dir, usageFile), err)
		}
	}
	return m, nil
}

func (a *Agent) meteringLoop(ctx context.Context, m *meter) {
	var sendDelay time.Duration
	nextSend := time.Time{}
	for {
		if err := m.scrape(ctx); err != nil && ctx.Err() == nil {
			a.log.Error("agent: metering: scrape", "err", err)
		}
		if now := time.Now(); !now.Before(nextSend) {
			if err := m.send(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				sendDelay = backoff(sendDelay)
				nextSend = now.Add(sendDelay)
				a.log.Warn("agent: metering: sending usage failed; kept on disk, retrying", "err", err, "pending", len(m.rollup.Pending()), "retry_in", sendDelay)
			} else {
				sendDelay, nextSend = 0, time.Time{}
			}
		}
		if !sleep(ctx, a.cfg.MeteringInterval) {
			return
		}
	}
}

// targets lists the ready clusters and their brokers' admin URLs.
func (m *meter) targets(ctx context.Context) []meteringTarget {
	a := m.a
	a.mu.Lock()
	var out []meteringTarget
	for name, e := range a.desired {
		if e.deleted || e.adminURL == "" {
			continue
		}
		out = append(out, meteringTarget{name: name, size: provisioner.Size{Brokers: int(e.cluster.GetSize().GetBrokers()),
			Bookies: int(e.cluster.GetSize().GetBookies())}, brokers: []string{e.adminURL}})
	}
	a.mu.Unlock()
	for i := range out {
		out[i].brokers = a.brokerAdminURLs(ctx, out[i].name, out[i].brokers[0])
	}
	return out
}

// brokerAdminURLs lists the admin URLs of every broker of a cluster, from
// its provisioner's status; fallback (the cluster's admin URL) when the
// provisioner names none.
func (a *Agent) brokerAdminURLs(ctx context.Context, cluster, fallback string) []string {
	st, err := a.prov.Status(ctx, cluster)
	if err != nil {
		return []string{fallback}
	}
	var urls []string
	a.trust.add(st.CACertPEM)
	for _, p := range st.Processes {
		switch {
		case p.Role != "broker":
		case p.HTTPSAddr != "" && st.CACertPEM != "":
			urls = append(urls, "https://"+p.HTTPSAddr)
		case p.HTTPAddr != "":
			urls = append(urls, "http://"+p.HTTPAddr)
		}
	}
	if len(urls) == 0 {
		return []string{fallback}
	}
	return urls
}

func (m *meter) client(adminURL, cluster string) (*pulsaradmin.Client, error) {
	if c := m.clients[adminURL]; c != nil {
		return c, nil
	}
	opts := append([]pulsaradmin.Option{pulsaradmin.WithHTTPClient(m.hc)}, m.a.cfg.AdminOptions...)
	c, err := pulsaradmin.New(adminURL, append(opts, m.a.adminAuth(cluster)...)...)
	if err != nil {
		return nil, err
	}
	m.clients[adminURL] = c
	return c, nil
}

// scrape reads every broker once and writes the roll-up.
func (m *meter) scrape(ctx context.Context) error {
	now := m.a.cfg.Now()
	keep := map[string]bool{}
	changed := false
	for _, t := range m.targets(ctx) {
		keep[t.name] = true
		org, _, ok := strings.Cut(strings.TrimPrefix(t.name, "organizations/"), "/")
		if !ok {
			continue
		}
		var samples []billing.Sample
		for _, u := range t.brokers {
			c, err := m.client(u, t.name)
			if err != nil {
				return err
			}
			usage, err := c.Usage(ctx)
			if err != nil {
				// Counted at its next answer (its cursor stays).
				m.a.log.Debug("agent: metering: broker did not answer", "cluster", t.name, "broker", u, "err", err)
				continue
			}
			samples = append(samples, usage.Samples(u)...)
		}
		extra := map[billing.Meter]int64{billing.BrokerHours: int64(t.size.Brokers), billing.BookieHours: int64(t.size.Bookies)}
		if err := m.rollup.Observe("organizations/"+org, t.name, now, samples, extra); err != nil {
			m.a.log.Error("agent: metering: broker counters refused", "cluster", t.name, "err", err)
			continue
		}
		changed = true
	}
	if !changed {
		return nil
	}
	m.rollup.Prune(now.Add(-usageKeep), nil)
	return m.save()
}

// send sends every pending total, in batches, acknowledging each batch in
// the file.
func (m *meter) send(ctx context.Context) error {
	pending := m.rollup.Pending()
	for len(pending) > 0 {
		batch := pending[:min(usageBatch, len(pending))]
		pending = pending[len(batch):]
		req := &cpv1.IngestUsageRecordsRequest{Region: m.a.cfg.Region}
		for _, r := range batch {
			req.Records = append(req.Records, &cpv1.UsageRecord{Organization: r.Key.Organization, Cluster: r.Key.Cluster,
				Region: m.a.cfg.Region, Meter: string(r.Key.Meter), Hour: timestamppb.New(r.Key.Hour), Quantity: r.Quantity,
				Revision: r.Revision, IdempotencyKey: r.IdempotencyKey})
		}
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		resp, err := m.a.billing.IngestUsageRecords(cctx, req)
		cancel()
		if err != nil {
			return err
		}
		for _, res := range resp.GetResults() {
			m.rollup.Ack(res.GetIdempotencyKey(), res.GetRevision())
		}
		if err := m.save(); err != nil {
			return err
		}
	}
	return nil
}

// save writes the roll-up atomically and durably.
func (m *meter) save() error {
	raw, err := m.rollup.Marshal()
	if err != nil {
		return fmt.Errorf("agent: metering: %w", err)
	}
	path := filepath.Join(m.dir, usageFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("agent: metering: %w", err)
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return fmt.Errorf("agent: metering: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("agent: metering: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("agent: metering: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("agent: metering: %w", err)
	}
	d, err := os.Open(m.dir)
	if err != nil {
		return fmt.Errorf("agent: metering: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("agent: metering: sync %s: %w", m.dir, err)
	}
	return nil
}
