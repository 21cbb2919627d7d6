package worker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	pb "github.com/magnetar-dev/magnetar/api/pulsarfunctions"
	"github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/functions/fnconfig"
)

func protoJSON(m proto.Message) ([]byte, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	s, err := compactJSON(b)
	return []byte(s), err
}

// ExceptionInfo is one recent exception in a status.
type ExceptionInfo struct {
	ExceptionString string `json:"exceptionString"`
	TimestampMs     int64  `json:"timestampMs"`
}

// InstanceStatusData is one instance's status with Pulsar's field names
// for all three kinds; the kind-specific counters are filled for the kind
// asked (see statusJSON).
type InstanceStatusData struct {
	Running                  bool            `json:"running"`
	Error                    string          `json:"error"`
	NumRestarts              int64           `json:"numRestarts"`
	NumReceived              int64           `json:"numReceived"`
	NumSuccessfullyProcessed int64           `json:"numSuccessfullyProcessed"`
	NumUserExceptions        int64           `json:"numUserExceptions"`
	LatestUserExceptions     []ExceptionInfo `json:"latestUserExceptions"`
	NumSystemExceptions      int64           `json:"numSystemExceptions"`
	LatestSystemExceptions   []ExceptionInfo `json:"latestSystemExceptions"`
	NumSourceExceptions      int64           `json:"numSourceExceptions"`
	LatestSourceExceptions   []ExceptionInfo `json:"latestSourceExceptions"`
	NumSinkExceptions        int64           `json:"numSinkExceptions"`
	LatestSinkExceptions     []ExceptionInfo `json:"latestSinkExceptions"`
	AverageLatency           float64         `json:"averageLatency"`
	LastInvocationTime       int64           `json:"lastInvocationTime"`
	WorkerID                 string          `json:"workerId"`
}

func exceptions(in []*pb.FunctionStatus_ExceptionInformation) []ExceptionInfo {
	out := []ExceptionInfo{}
	for _, e := range in {
		out = append(out, ExceptionInfo{ExceptionString: e.ExceptionString, TimestampMs: e.MsSinceEpoch})
	}
	return out
}

// kindJSON renders an instance status with the field names of kind.
func kindJSON(kind fnconfig.Kind, s InstanceStatusData) map[string]any {
	base := map[string]any{
		"running": s.Running, "error": s.Error, "numRestarts": s.NumRestarts,
		"numSystemExceptions": s.NumSystemExceptions, "latestSystemExceptions": nonNil(s.LatestSystemExceptions),
		"workerId": s.WorkerID,
	}
	switch kind {
	case fnconfig.KindSource:
		base["numReceivedFromSource"] = s.NumReceived
		base["numWritten"] = s.NumSuccessfullyProcessed
		base["numSourceExceptions"] = s.NumSourceExceptions
		base["latestSourceExceptions"] = nonNil(s.LatestSourceExceptions)
		base["lastReceivedTime"] = s.LastInvocationTime
	case fnconfig.KindSink:
		base["numReadFromPulsar"] = s.NumReceived
		base["numWrittenToSink"] = s.NumSuccessfullyProcessed
		base["numSinkExceptions"] = s.NumSinkExceptions
		base["latestSinkExceptions"] = nonNil(s.LatestSinkExceptions)
		base["lastReceivedTime"] = s.LastInvocationTime
	default:
		base["numReceived"] = s.NumReceived
		base["numSuccessfullyProcessed"] = s.NumSuccessfullyProcessed
		base["numUserExceptions"] = s.NumUserExceptions
		base["latestUserExceptions"] = nonNil(s.LatestUserExceptions)
		base["averageLatency"] = s.AverageLatency
		base["lastInvocationTime"] = s.LastInvocationTime
	}
	return base
}

func nonNil(e []ExceptionInfo) []ExceptionInfo {
	if e == nil {
		return []ExceptionInfo{}
	}
	return e
}

// localStatus is the status of an instance this worker runs (or says why
// it runs none).
func (w *Worker) localStatus(ctx context.Context, inst string) InstanceStatusData {
	out := InstanceStatusData{WorkerID: w.cfg.ID}
	w.mu.Lock()
	run := w.running[inst]
	w.mu.Unlock()
	if run == nil {
		out.Error = "instance is not running on worker " + w.cfg.ID
		return out
	}
	st, client := run.sup.snapshot()
	out.NumRestarts = st.Restarts
	if client == nil {
		out.Error = st.LastError
		if out.Error == "" {
			out.Error = "instance is starting"
		}
		return out
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fs, err := client.GetFunctionStatus(cctx, &emptypb.Empty{})
	if err != nil {
		out.Error = "instance is starting or not answering: " + err.Error()
		if st.LastError != "" {
			out.Error += "; previous run: " + st.LastError
		}
		return out
	}
	out.Running = fs.Running
	out.Error = fs.FailureException
	out.NumReceived = fs.NumReceived
	out.NumSuccessfullyProcessed = fs.NumSuccessfullyProcessed
	out.NumUserExceptions = fs.NumUserExceptions
	out.LatestUserExceptions = exceptions(fs.LatestUserExceptions)
	out.NumSystemExceptions = fs.NumSystemExceptions
	out.LatestSystemExceptions = exceptions(fs.LatestSystemExceptions)
	out.NumSourceExceptions = fs.NumSourceExceptions
	out.LatestSourceExceptions = exceptions(fs.LatestSourceExceptions)
	out.NumSinkExceptions = fs.NumSinkExceptions
	out.LatestSinkExceptions = exceptions(fs.LatestSinkExceptions)
	out.AverageLatency = fs.AverageLatency
	out.LastInvocationTime = fs.LastInvocationTime
	return out
}

// remote asks the worker that owns an instance for one of its
// per-instance endpoints (status or stats) and decodes the answer.
func (w *Worker) remote(ctx context.Context, owner string, kind fnconfig.Kind, t, ns, n string, i int, what string, out any) error {
	ws, err := w.liveWorkers(ctx)
	if err != nil {
		return err
	}
	base := ""
	for _, wi := range ws {
		if wi.ID == owner {
			base = wi.URL
		}
	}
	if base == "" {
		return fmt.Errorf("worker %s is not registered", owner)
	}
	u := fmt.Sprintf("%s/admin/v3/%s/%s/%s/%s/%d/%s", base, kind.Plural(), url.PathEscape(t), url.PathEscape(ns), url.PathEscape(n), i, what)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set(forwardedHeader, "1")
	if err := w.cfg.Broker.SignInternal(req); err != nil {
		return err
	}
	resp, err := w.cfg.Broker.PeerHTTPClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("worker %s answered %s: %s", owner, resp.Status, b)
	}
	return json.Unmarshal(b, out)
}

// instanceStatus is the status of instance i, asked of its owner.
func (w *Worker) instanceStatus(ctx context.Context, rec *Record, i int, forwarded bool) InstanceStatusData {
	inst := InstanceKey(rec.Kind, rec.Tenant, rec.Namespace, rec.Name, i)
	if rec.isStopped(i) {
		return InstanceStatusData{Error: "instance is stopped", LatestUserExceptions: []ExceptionInfo{}}
	}
	owner := w.owner(inst)
	switch {
	case owner == w.cfg.ID || forwarded:
		return w.localStatus(ctx, inst)
	case owner == "":
		return InstanceStatusData{Error: "instance is not assigned to a worker yet"}
	}
	var out map[string]any
	if err := w.remote(ctx, owner, rec.Kind, rec.Tenant, rec.Namespace, rec.Name, i, "status", &out); err != nil {
		return InstanceStatusData{WorkerID: owner, Error: "status from worker " + owner + ": " + err.Error()}
	}
	return fromKindJSON(rec.Kind, out)
}

// fromKindJSON reads back what kindJSON wrote.
func fromKindJSON(kind fnconfig.Kind, m map[string]any) InstanceStatusData {
	b, _ := json.Marshal(m)
	var s InstanceStatusData
	json.Unmarshal(b, &s)
	num := func(k string) int64 {
		f, _ := m[k].(float64)
		return int64(f)
	}
	exc := func(k string) []ExceptionInfo {
		var e []ExceptionInfo
		raw, _ := json.Marshal(m[k])
		json.Unmarshal(raw, &e)
		return e
	}
	switch kind {
	case fnconfig.KindSource:
		s.NumReceived, s.NumSuccessfullyProcessed, s.LastInvocationTime = num("numReceivedFromSource"), num("numWritten"), num("lastReceivedTime")
		s.LatestSourceExceptions = exc("latestSourceExceptions")
	case fnconfig.KindSink:
		s.NumReceived, s.NumSuccessfullyProcessed, s.LastInvocationTime = num("numReadFromPulsar"), num("numWrittenToSink"), num("lastReceivedTime")
		s.LatestSinkExceptions = exc("latestSinkExceptions")
	}
	return s
}

func (w *Worker) status(rw http.ResponseWriter, r *http.Request, kind fnconfig.Kind, t, ns, n string, i int) error {
	ctx := r.Context()
	rec, _, err := w.getRecord(ctx, kind, t, ns, n)
	if err != nil {
		return err
	}
	forwarded := r.Header.Get(forwardedHeader) != ""
	par := rec.Parallelism()
	if i >= 0 {
		if i >= par {
			return errCode(http.StatusBadRequest, "Invalid instance id %d: %s %s has %d instances", i, kind, n, par)
		}
		writeJSON(rw, http.StatusOK, kindJSON(kind, w.instanceStatus(ctx, rec, i, forwarded)))
		return nil
	}
	all := make([]InstanceStatusData, par)
	forEachInstance(par, func(i int) { all[i] = w.instanceStatus(ctx, rec, i, false) })
	instances := []map[string]any{}
	running := 0
	for i, s := range all {
		if s.Running {
			running++
		}
		instances = append(instances, map[string]any{"instanceId": i, "status": kindJSON(kind, s)})
	}
	writeJSON(rw, http.StatusOK, map[string]any{"numInstances": par, "numRunning": running, "instances": instances})
	return nil
}

// forEachInstance calls fn for instances 0..n-1 concurrently (each may
// ask another worker) and waits for them.
func forEachInstance(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
}

// StatsData is Pulsar's function stats (totals and the last minute's).
type StatsData struct {
	ReceivedTotal              int64   `json:"receivedTotal"`
	ProcessedSuccessfullyTotal int64   `json:"processedSuccessfullyTotal"`
	SystemExceptionsTotal      int64   `json:"systemExceptionsTotal"`
	UserExceptionsTotal        int64   `json:"userExceptionsTotal"`
	AvgProcessLatency          float64 `json:"avgProcessLatency"`
}

// InstanceStats is one instance's metrics in a stats answer.
type InstanceStats struct {
	StatsData
	OneMin         StatsData          `json:"oneMin"`
	LastInvocation int64              `json:"lastInvocation"`
	UserMetrics    map[string]float64 `json:"userMetrics"`
}

func (w *Worker) localStats(ctx context.Context, inst string) InstanceStats {
	out := InstanceStats{UserMetrics: map[string]float64{}}
	w.mu.Lock()
	run := w.running[inst]
	w.mu.Unlock()
	if run == nil {
		return out
	}
	_, client := run.sup.snapshot()
	if client == nil {
		return out
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := client.GetMetrics(cctx, &emptypb.Empty{})
	if err != nil {
		return out
	}
	out.StatsData = StatsData{m.ReceivedTotal, m.ProcessedSuccessfullyTotal, m.SystemExceptionsTotal, m.UserExceptionsTotal, m.AvgProcessLatency}
	out.OneMin = StatsData{m.ReceivedTotal_1Min, m.ProcessedSuccessfullyTotal_1Min, m.SystemExceptionsTotal_1Min, m.UserExceptionsTotal_1Min, m.AvgProcessLatency_1Min}
	out.LastInvocation = m.LastInvocation
	for k, v := range m.UserMetrics {
		out.UserMetrics[k] = v
	}
	return out
}

func (w *Worker) instanceStats(ctx context.Context, rec *Record, i int, forwarded bool) InstanceStats {
	inst := InstanceKey(rec.Kind, rec.Tenant, rec.Namespace, rec.Name, i)
	owner := w.owner(inst)
	if owner == w.cfg.ID || forwarded || owner == "" || rec.isStopped(i) {
		return w.localStats(ctx, inst)
	}
	var out InstanceStats
	if err := w.remote(ctx, owner, rec.Kind, rec.Tenant, rec.Namespace, rec.Name, i, "stats", &out); err != nil {
		return InstanceStats{UserMetrics: map[string]float64{}}
	}
	return out
}

func (w *Worker) stats(rw http.ResponseWriter, r *http.Request, t, ns, n string, i int) error {
	ctx := r.Context()
	rec, _, err := w.getRecord(ctx, fnconfig.KindFunction, t, ns, n)
	if err != nil {
		return err
	}
	par := rec.Parallelism()
	forwarded := r.Header.Get(forwardedHeader) != ""
	if i >= 0 {
		if i >= par {
			return errCode(http.StatusBadRequest, "Invalid instance id %d: function %s has %d instances", i, n, par)
		}
		writeJSON(rw, http.StatusOK, w.instanceStats(ctx, rec, i, forwarded))
		return nil
	}
	all := make([]InstanceStats, par)
	forEachInstance(par, func(i int) { all[i] = w.instanceStats(ctx, rec, i, false) })
	var total, oneMin StatsData
	var last int64
	instances := []map[string]any{}
	for i, s := range all {
		total.ReceivedTotal += s.ReceivedTotal
		total.ProcessedSuccessfullyTotal += s.ProcessedSuccessfullyTotal
		total.SystemExceptionsTotal += s.SystemExceptionsTotal
		total.UserExceptionsTotal += s.UserExceptionsTotal
		total.AvgProcessLatency += s.AvgProcessLatency
		oneMin.ReceivedTotal += s.OneMin.ReceivedTotal
		oneMin.ProcessedSuccessfullyTotal += s.OneMin.ProcessedSuccessfullyTotal
		oneMin.SystemExceptionsTotal += s.OneMin.SystemExceptionsTotal
		oneMin.UserExceptionsTotal += s.OneMin.UserExceptionsTotal
		oneMin.AvgProcessLatency += s.OneMin.AvgProcessLatency
		last = max(last, s.LastInvocation)
		instances = append(instances, map[string]any{"instanceId": i, "metrics": s})
	}
	if par > 0 {
		total.AvgProcessLatency /= float64(par)
		oneMin.AvgProcessLatency /= float64(par)
	}
	writeJSON(rw, http.StatusOK, map[string]any{
		"receivedTotal": total.ReceivedTotal, "processedSuccessfullyTotal": total.ProcessedSuccessfullyTotal,
		"systemExceptionsTotal": total.SystemExceptionsTotal, "userExceptionsTotal": total.UserExceptionsTotal,
		"avgProcessLatency": total.AvgProcessLatency, "oneMin": oneMin, "lastInvocation": last, "instances": instances,
	})
	return nil
}

// trigger produces a value to the function's input topic (or the topic
// named) and answers the function's output for it, as pulsar-admin
// functions trigger does: the output topic is read from its end before
// the value is produced, and the first output that names the produced
// message (__pfn_input_msg_id__) or, from instances that do not name it,
// the first output at all, is the answer.
func (w *Worker) trigger(rw http.ResponseWriter, r *http.Request, t, ns, n string) error {
	ctx := r.Context()
	rec, _, err := w.getRecord(ctx, fnconfig.KindFunction, t, ns, n)
	if err != nil {
		return err
	}
	d, err := rec.FunctionDetails()
	if err != nil {
		return err
	}
	value, topic, err := triggerParts(r)
	if err != nil {
		return err
	}
	inputs := maps.Keys(d.Source.GetInputSpecs())
	if topic == "" {
		for t := range inputs {
			if topic != "" {
				return errCode(http.StatusBadRequest, "Function %s has more than one input topic: name the topic to trigger", n)
			}
			topic = t
		}
	} else if _, ok := d.Source.GetInputSpecs()[topic]; !ok {
		return errCode(http.StatusBadRequest, "Function %s has no input topic %s", n, topic)
	}
	if topic == "" {
		return errCode(http.StatusBadRequest, "Function %s has no input topic to trigger", n)
	}
	opts := pulsar.ClientOptions{URL: w.cfg.ServiceURL, OperationTimeout: 10 * time.Second,
		Logger: pulsarlog.DefaultNopLogger()}
	switch {
	case w.cfg.InstanceTokenFile != "":
		opts.Authentication = pulsar.NewAuthenticationTokenFromFile(w.cfg.InstanceTokenFile)
	case w.cfg.InstanceToken != "":
		opts.Authentication = pulsar.NewAuthenticationToken(w.cfg.InstanceToken)
	}
	if w.cfg.TLSTrustCerts != "" {
		opts.TLSTrustCertsFilePath = w.cfg.TLSTrustCerts
	}
	client, err := pulsar.NewClient(opts)
	if err != nil {
		return err
	}
	defer client.Close()
	var reader pulsar.Reader
	if out := d.Sink.GetTopic(); out != "" {
		if reader, err = client.CreateReader(pulsar.ReaderOptions{Topic: out, StartMessageID: pulsar.LatestMessageID()}); err != nil {
			return fmt.Errorf("reading the output topic: %w", err)
		}
		defer reader.Close()
	}
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return fmt.Errorf("producing to %s: %w", topic, err)
	}
	defer producer.Close()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	id, err := producer.Send(tctx, &pulsar.ProducerMessage{Payload: value})
	if err != nil {
		return fmt.Errorf("producing to %s: %w", topic, err)
	}
	if reader == nil {
		rw.WriteHeader(http.StatusOK)
		return nil
	}
	for {
		msg, err := reader.Next(tctx)
		if err != nil {
			return errCode(http.StatusRequestTimeout, "Request Timed Out: no output of %s for the triggered value", n)
		}
		if got, ok := msg.Properties()["__pfn_input_msg_id__"]; ok && !sameEntry(got, id) {
			continue
		}
		rw.Header().Set("Content-Type", "text/plain")
		rw.WriteHeader(http.StatusOK)
		rw.Write(msg.Payload())
		return nil
	}
}

// sameEntry reports whether an output's __pfn_input_msg_id__ (a
// serialized MessageIdData, base64, standard or URL-safe as instances
// differ) names the entry of id. Clients serialize the optional fields
// differently, so ledger and entry are compared.
func sameEntry(prop string, id pulsar.MessageID) bool {
	var raw []byte
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if raw, err = enc.DecodeString(prop); err == nil {
			break
		}
	}
	if err != nil {
		return false
	}
	var m pulsarwire.MessageIdData
	if proto.Unmarshal(raw, &m) != nil {
		return false
	}
	return int64(m.GetLedgerId()) == id.LedgerID() && int64(m.GetEntryId()) == id.EntryID()
}

// triggerParts reads a trigger's multipart body: the value as text
// (data) or a file (dataStream), and the topic.
func triggerParts(r *http.Request) (value []byte, topic string, err error) {
	mt, params, perr := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if perr != nil || !strings.HasPrefix(mt, "multipart/") {
		return nil, "", errCode(http.StatusBadRequest, "expected a multipart body with data or dataStream")
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	got := false
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, "", errCode(http.StatusBadRequest, "malformed multipart body: %v", err)
		}
		b, err := io.ReadAll(io.LimitReader(part, 5<<20))
		if err != nil {
			return nil, "", err
		}
		switch part.FormName() {
		case "data", "dataStream":
			value, got = b, true
		case "topic":
			topic = strings.TrimSpace(string(b))
		}
	}
	if !got {
		return nil, "", errCode(http.StatusBadRequest, "Function trigger data is not provided")
	}
	return value, topic, nil
}
