// Package k8s holds the Kubernetes manifests and their check: every
// document of every *.yaml here is decoded strictly (an unknown or
// misspelt field fails) into the upstream Go API type of its kind —
// k8s.io/api for the core kinds, the prometheus-operator's for the
// ServiceMonitor, KEDA's for the ScaledObject and TriggerAuthentication —
// and the parts that must agree (selectors, ports, probes, the grace period
// and the shutdown timeout, the security context) are checked against
// each other. It is a module of its own so that these types stay out of
// the service's dependencies; .ci/run runs it: cd deploy/k8s && go test ./...
package k8s

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// kinds maps apiVersion/kind to a new object of its upstream type.
var kinds = map[string]func() any{
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"batch/v1/CronJob":                        func() any { return &batchv1.CronJob{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"keda.sh/v1alpha1/ScaledObject":           func() any { return &kedav1alpha1.ScaledObject{} },
	"keda.sh/v1alpha1/TriggerAuthentication":  func() any { return &kedav1alpha1.TriggerAuthentication{} },
}

// decode reads every document of data strictly into its kind's type.
func decode(name string, data []byte) ([]any, error) {
	var objs []any
	for i, doc := range bytes.Split(data, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, &docError{name, i, err.Error()}
		}
		newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			return nil, &docError{name, i, "kind " + tm.APIVersion + "/" + tm.Kind + " is not one this check knows"}
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, &docError{name, i, err.Error()}
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

type docError struct {
	file string
	doc  int
	msg  string
}

func (e *docError) Error() string {
	return e.file + ", document " + strconv.Itoa(e.doc+1) + ": " + e.msg
}

func readAll(t *testing.T) []any {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var all []any
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decode(f, data)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, objs...)
	}
	return all
}

func one[T any](t *testing.T, all []any) T {
	t.Helper()
	var found []T
	for _, o := range all {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T, want one", len(found), zero)
	}
	return found[0]
}

// named is the one object of type T called name.
func named[T interface{ GetName() string }](t *testing.T, all []any, name string) T {
	t.Helper()
	for _, o := range all {
		if v, ok := o.(T); ok && v.GetName() == name {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T named %s", zero, name)
	return zero
}

// The reconciliation job runs under its own service account, as the
// consumer's user, with the fingerprint key the consumer uses, and never
// retries a run that found breaks (exit 1 is an answer).
func TestTheReconciliationJob(t *testing.T) {
	all := readAll(t)
	cj := one[*batchv1.CronJob](t, all)
	dep := one[*appsv1.Deployment](t, all)
	sa := named[*corev1.ServiceAccount](t, all, "chargerecovery-reconcile")
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	if pod.ServiceAccountName != sa.Name {
		t.Errorf("the job runs as %q, want %s", pod.ServiceAccountName, sa.Name)
	}
	if b := cj.Spec.JobTemplate.Spec.BackoffLimit; b == nil || *b != 0 {
		t.Error("backoffLimit must be 0: a run that found breaks exits 1, and a retry only reports them again")
	}
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("concurrencyPolicy %q, want Forbid", cj.Spec.ConcurrencyPolicy)
	}
	c := pod.Containers[0]
	if c.Image != dep.Spec.Template.Spec.Containers[0].Image || len(c.Args) == 0 || c.Args[0] != "reconcile" || len(c.Command) != 0 {
		t.Errorf("the job runs %v %v in %s; want the consumer's image running reconcile (no shell in it)", c.Command, c.Args, c.Image)
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounted[m.MountPath] = true
	}
	for _, m := range dep.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == "fingerprint-key" && !mounted[m.MountPath] {
			t.Errorf("the job does not mount the fingerprint key where the config says (%s): amounts could not be checked", m.MountPath)
		}
	}
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Error("the job may run as root")
	}
}

// A misspelt field fails the check (the decode is strict).
func TestAnUnknownFieldIsRefused(t *testing.T) {
	bad := []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  replica: 2\n")
	if _, err := decode("bad.yaml", bad); err == nil || !strings.Contains(err.Error(), "replica") {
		t.Fatalf("decode of spec.replica: %v, want an unknown-field error", err)
	}
	bad = []byte("apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n  name: x\nspec:\n  scaleTargetRef:\n    name: x\n  maxReplicas: 3\n")
	if _, err := decode("bad.yaml", bad); err == nil || !strings.Contains(err.Error(), "maxReplicas") {
		t.Fatalf("decode of a ScaledObject's spec.maxReplicas: %v, want an unknown-field error", err)
	}
}

func TestTheManifestsAgree(t *testing.T) {
	all := readAll(t)
	cm := one[*corev1.ConfigMap](t, all)
	dep := one[*appsv1.Deployment](t, all)
	svc := one[*corev1.Service](t, all)
	sm := one[*monitoringv1.ServiceMonitor](t, all)
	pdb := one[*policyv1.PodDisruptionBudget](t, all)
	so := one[*kedav1alpha1.ScaledObject](t, all)
	ta := one[*kedav1alpha1.TriggerAuthentication](t, all)
	sa := named[*corev1.ServiceAccount](t, all, "chargerecovery")

	pod := dep.Spec.Template
	labels := pod.Labels
	matches := func(what string, sel map[string]string) {
		t.Helper()
		if len(sel) == 0 {
			t.Errorf("%s selects nothing", what)
		}
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s selects %s=%s, which the pods do not carry (%v)", what, k, v, labels)
			}
		}
	}
	matches("the Deployment", dep.Spec.Selector.MatchLabels)
	matches("the Service", svc.Spec.Selector)
	matches("the PodDisruptionBudget", pdb.Spec.Selector.MatchLabels)
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the Service does not carry", k, v)
		}
	}
	if so.Spec.ScaleTargetRef == nil || so.Spec.ScaleTargetRef.Name != dep.Name {
		t.Errorf("the ScaledObject scales %+v, want the Deployment %s", so.Spec.ScaleTargetRef, dep.Name)
	}
	for _, tr := range so.Spec.Triggers {
		if tr.AuthenticationRef == nil || tr.AuthenticationRef.Name != ta.Name {
			t.Errorf("trigger %s authenticates with %+v, want %s", tr.Type, tr.AuthenticationRef, ta.Name)
		}
		if tr.Type == "aws-sqs-queue" && tr.Metadata["queueURL"] != cm.Data["IC_QUEUE"] {
			t.Errorf("KEDA watches %s, the consumer reads %s", tr.Metadata["queueURL"], cm.Data["IC_QUEUE"])
		}
		// A charge that waits (--retry-declines, --notice-lead: every
		// charge waits its lead) is hidden on SQS by its visibility, i.e.
		// in flight, for up to 12 hours at a time: KEDA's default counts
		// in-flight messages (ApproximateNumberOfMessagesNotVisible), so a
		// month-end of waiting charges holds the consumer at its most pods
		// for days with nothing to do.
		if tr.Type == "aws-sqs-queue" && tr.Metadata["scaleOnInFlight"] != "false" {
			t.Errorf("KEDA scales on the in-flight messages too (scaleOnInFlight %q, default true): every waiting charge counts as work", tr.Metadata["scaleOnInFlight"])
		}
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 2 {
		t.Error("KEDA may scale below two consumers")
	}
	if pod.Spec.ServiceAccountName != sa.Name {
		t.Errorf("pods run as %q, want the service account %s", pod.Spec.ServiceAccountName, sa.Name)
	}

	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want one", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	shutdown, err := time.ParseDuration(cm.Data["IC_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatalf("IC_SHUTDOWN_TIMEOUT: %v", err)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= shutdown+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %d is not comfortably longer than the shutdown timeout %s", ptrOr(g), shutdown)
	}
	port := map[string]int32{}
	for _, p := range c.Ports {
		port[p.Name] = p.ContainerPort
	}
	if addr := cm.Data["IC_HTTP_ADDR"]; !strings.HasSuffix(addr, ":9090") || strings.HasPrefix(addr, "127.") || port["metrics"] != 9090 {
		t.Errorf("IC_HTTP_ADDR %q and container port %d: the ops server must listen on the pod's interfaces on the metrics port", addr, port["metrics"])
	}
	for what, pr := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		want := "/healthz"
		if what == "readiness" {
			want = "/readyz"
		}
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != want || pr.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe %+v, want GET %s on the metrics port", what, pr, want)
		}
	}
	if svc.Spec.Ports[0].TargetPort.String() != "metrics" || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name {
		t.Error("the Service and the ServiceMonitor do not point at the metrics port")
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Error("no memory request or limit")
	}

	psc, sc := pod.Spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Errorf("pod security context %+v, want non-root as 65532 (the image's user)", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil ||
		*sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container security context %+v, want read-only root, no privilege escalation, all capabilities dropped", sc)
	}

	// Every file path in the configuration is under a mounted secret, and
	// no secret value sits in the ConfigMap.
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	secretDirs := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			secretDirs[mounts[v.Name]] = true
		}
	}
	for k, v := range cm.Data {
		if strings.HasSuffix(k, "_FILE") || strings.HasSuffix(k, "_CA") || strings.HasSuffix(k, "_CERT") || strings.HasSuffix(k, "_KEY") {
			if !secretDirs[filepath.Dir(v)] {
				t.Errorf("%s=%s is not in a mounted secret (%v)", k, v, secretDirs)
			}
		}
		if strings.Contains(strings.ToUpper(k), "SECRET") && !strings.HasSuffix(k, "_FILE") {
			t.Errorf("%s looks like a secret value in a ConfigMap", k)
		}
	}
}

func ptrOr(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
