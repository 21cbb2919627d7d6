package worker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics adds the worker's series to reg (the broker's /metrics):
//
//	magnetar_functions_instances                  gauge: instances assigned to this worker and supervised
//	magnetar_functions_instances_running          gauge: of those, instances whose process is up
//	magnetar_functions_instance_restarts_total    counter: instance processes that exited and were restarted
//	magnetar_functions_scheduler_leader           gauge: 1 on the worker that schedules, 0 elsewhere
//	magnetar_functions_instance_start_seconds     histogram{runtime}: process exec → first health answer
func (w *Worker) RegisterMetrics(reg prometheus.Registerer) error {
	snapshot := func() (supervised, running int, restarts int64) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, r := range w.running {
			st, _ := r.sup.snapshot()
			supervised++
			if st.Running {
				running++
			}
			restarts += st.Restarts
		}
		return supervised, running, restarts + w.restartsGone
	}
	for _, c := range []prometheus.Collector{
		w.startSeconds,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "magnetar_functions_instances",
			Help: "Function, source and sink instances assigned to this worker."},
			func() float64 { n, _, _ := snapshot(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "magnetar_functions_instances_running",
			Help: "Instances of this worker whose process is up."},
			func() float64 { _, n, _ := snapshot(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "magnetar_functions_instance_restarts_total",
			Help: "Instance processes of this worker that exited and were restarted."},
			func() float64 { _, _, n := snapshot(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "magnetar_functions_scheduler_leader",
			Help: "1 on the worker elected to assign instances, 0 on the others."},
			func() float64 {
				w.mu.Lock()
				defer w.mu.Unlock()
				if w.leader {
					return 1
				}
				return 0
			}),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
