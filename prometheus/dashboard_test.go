package prometheus_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	dlockprom "github.com/dlock-go/dlock/prometheus"
)

// dashboardQueries returns every PromQL query of the shipped dashboard,
// with its metric prefix variable replaced by prefix.
func dashboardQueries(t *testing.T, prefix string) []string {
	qs := rawQueries(t)
	for i, q := range qs {
		qs[i] = strings.NewReplacer("${prefix}", prefix, "$prefix", prefix).Replace(q)
	}
	return qs
}

// rawQueries returns every PromQL query of the shipped dashboard, as the
// file has it.
func rawQueries(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("grafana/dlock.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	var qs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok && strings.Contains(q, "label_values") {
			qs = append(qs, q)
		}
	}
	if len(qs) < 6 {
		t.Fatalf("%d queries in the dashboard", len(qs))
	}
	return qs
}

var (
	selector = regexp.MustCompile(`(dlock_[a-z_]+)(\{([^}]*)\})?`)
	matcher  = regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	byClause = regexp.MustCompile(`by\s*\(([^)]*)\)`)
	labelArg = regexp.MustCompile(`label_values\(\s*dlock_[a-z_]+\s*,\s*([a-z_]+)\s*\)`)
)

// exported runs a real workload that gives every outcome the dashboard
// shows, and returns what the adapter, made with o, exports: metric
// families by name.
func exported(t *testing.T, o dlockprom.Options) map[string]*dto.MetricFamily {
	s := redistest.Start(t)
	rdb := s.Client(t)
	c := dlock.New(rdb)
	defer c.Close()
	m := dlockprom.New(o)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	c.SetObserver(m.Observe)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	l, err := c.TryLock(ctx, "job", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "job"); !errors.Is(err, dlock.ErrNotObtained) { // contended
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil { // a renewal
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil { // a hold
		t.Fatal(err)
	}
	stolen, err := c.TryLock(ctx, "stolen", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, "stolen", "someone-else", time.Minute)
	_ = stolen.Extend(ctx, time.Minute) // a failed renewal
	_ = stolen.Unlock(ctx)              // a token mismatch
	short, err := c.TryLock(ctx, "short", dlock.WithTTL(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-short.Context().Done() // a loss: the lease ran out
	time.Sleep(10 * time.Millisecond)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// family returns the family a series name belongs to (a histogram's
// _bucket, _sum and _count are its own).
func family(fams map[string]*dto.MetricFamily, name string) (*dto.MetricFamily, bool) {
	if f, ok := fams[name]; ok {
		return f, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := fams[strings.TrimSuffix(name, suffix)]; ok && strings.HasSuffix(name, suffix) && f.GetType() == dto.MetricType_HISTOGRAM {
			return f, true
		}
	}
	return nil, false
}

// Every query of the shipped dashboard names metrics and labels the
// adapter exports, and finds series under a real workload: a dashboard
// that lies about the metrics shows empty panels, silently.
func TestTheDashboardQueriesWhatTheAdapterExports(t *testing.T) {
	fams := exported(t, dlockprom.Options{})
	for _, q := range dashboardQueries(t, "dlock") {
		expr := strings.NewReplacer("$__rate_interval", "5m", "$lock", ".*", "$primitive", ".*").Replace(q)
		sels := selector.FindAllStringSubmatch(expr, -1)
		if len(sels) == 0 {
			t.Errorf("query names no dlock metric: %s", q)
		}
		labels := map[string]bool{"le": true}
		for _, sel := range sels {
			f, ok := family(fams, sel[1])
			if !ok {
				t.Errorf("query %q: the adapter exports no %s", q, sel[1])
				continue
			}
			names := map[string]bool{}
			for _, lp := range f.GetMetric()[0].GetLabel() {
				names[lp.GetName()] = true
				labels[lp.GetName()] = true
			}
			matchers := matcher.FindAllStringSubmatch(sel[3], -1)
			for _, mt := range matchers {
				if !names[mt[1]] {
					t.Errorf("query %q: %s has no label %q", q, sel[1], mt[1])
				}
			}
			if !anySeries(f, matchers) {
				t.Errorf("query %q: no series of %s matches {%s} under the workload", q, sel[1], sel[3])
			}
		}
		for _, by := range byClause.FindAllStringSubmatch(expr, -1) {
			for _, l := range strings.Split(by[1], ",") {
				if l = strings.TrimSpace(l); !labels[l] {
					t.Errorf("query %q: grouped by %q, which its metrics do not have", q, l)
				}
			}
		}
		for _, la := range labelArg.FindAllStringSubmatch(expr, -1) {
			if !labels[la[1]] {
				t.Errorf("query %q: label_values of %q, which the metric does not have", q, la[1])
			}
		}
	}
}

// anySeries reports whether some series of f satisfies every matcher.
func anySeries(f *dto.MetricFamily, matchers [][]string) bool {
	for _, m := range f.GetMetric() {
		values := map[string]string{}
		for _, lp := range m.GetLabel() {
			values[lp.GetName()] = lp.GetValue()
		}
		ok := true
		for _, mt := range matchers {
			v := values[mt[1]]
			re := regexp.MustCompile("^(?:" + mt[3] + ")$")
			switch mt[2] {
			case "=":
				ok = ok && v == mt[3]
			case "!=":
				ok = ok && v != mt[3]
			case "=~":
				ok = ok && re.MatchString(v)
			case "!~":
				ok = ok && !re.MatchString(v)
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// The dashboard takes the metrics' prefix from a variable (default
// "dlock"), so that it shows the metrics of an adapter with a Namespace:
// no query names a metric outright, and every metric such an adapter
// exports is queried.
func TestTheDashboardTakesTheMetricPrefixFromAVariable(t *testing.T) {
	data, err := os.ReadFile("grafana/dlock.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name    string `json:"name"`
				Query   any    `json:"query"`
				Current struct {
					Value any `json:"value"`
				} `json:"current"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range d.Templating.List {
		if v.Name == "prefix" {
			found = v.Query == "dlock" && v.Current.Value == "dlock"
		}
	}
	if !found {
		t.Errorf("the dashboard has no variable prefix with the default dlock")
	}
	for _, q := range rawQueries(t) {
		if strings.Contains(q, "dlock_") {
			t.Errorf("query names a metric outright, not through $prefix: %s", q)
		}
	}
	fams := exported(t, dlockprom.Options{Namespace: "myapp"})
	queries := dashboardQueries(t, "myapp_dlock")
	names := regexp.MustCompile(`\bmyapp_dlock_[a-z_]+`)
	queried := map[string]bool{}
	for _, q := range queries {
		for _, name := range names.FindAllString(q, -1) {
			f, ok := family(fams, name)
			if !ok {
				t.Errorf("query %q: an adapter with Namespace myapp exports no %s", q, name)
				continue
			}
			queried[f.GetName()] = true
		}
	}
	for name := range fams {
		if !queried[name] {
			t.Errorf("the dashboard does not query %s", name)
		}
	}
}
