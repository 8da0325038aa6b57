// Package helm_test proves the chart in ./ctxproxy the way a cluster reads
// it: rendered by Helm's own code (the pinned helm.sh/helm/v4), every object
// decoded strictly into the Kubernetes API types, and the Deployment's
// configuration run as the real binary.
package helm_test

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"
	release "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test.
const chartDir = "ctxproxy"

// serviceMonitor is the part of the Prometheus operator's ServiceMonitor the
// chart writes (its CRD is not in k8s.io/api); decoded strictly like the rest.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered is one `helm template` of the chart, every object typed.
type rendered struct {
	Notes           string
	Deployments     []*appsv1.Deployment
	Services        []*corev1.Service
	ConfigMaps      []*corev1.ConfigMap
	Secrets         []*corev1.Secret
	Jobs            []*batchv1.Job
	PDBs            []*policyv1.PodDisruptionBudget
	HPAs            []*autoscalingv2.HorizontalPodAutoscaler
	ServiceMonitors []*serviceMonitor
	// Hooks are the hook objects by "Kind/name".
	Hooks map[string]*release.Hook
}

// render renders dir (a chart folder) as `helm template` does, with the
// values files and --set values given; the error is Helm's.
func render(t *testing.T, dir string, valueFiles []string, sets ...string) (*rendered, error) {
	t.Helper()
	vals, err := (&values.Options{ValueFiles: valueFiles, Values: sets}).MergeValues(getter.Providers{})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(io.Discard, nil))))
	inst.DryRunStrategy = action.DryRunClient
	inst.ReleaseName = "ctxproxy"
	inst.Namespace = "gateway"
	inst.Replace = true
	ri, err := inst.Run(ch, vals)
	if err != nil {
		return nil, err
	}
	rel, ok := ri.(*release.Release)
	if !ok {
		t.Fatalf("release type %T", ri)
	}
	out := &rendered{Notes: rel.Info.Notes, Hooks: map[string]*release.Hook{}}
	docs := splitDocs(rel.Manifest)
	for _, h := range rel.Hooks {
		out.Hooks[h.Kind+"/"+h.Name] = h
		docs = append(docs, splitDocs(h.Manifest)...)
	}
	for _, doc := range docs {
		if err := out.add(doc); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
	}
	return out, nil
}

func splitDocs(manifest string) []string {
	var docs []string
	for _, d := range strings.Split(manifest, "\n---") {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// add decodes doc strictly (an unknown field is an error) into its kind's type.
func (r *rendered) add(doc string) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		return err
	}
	strict := func(v any) error {
		if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
			return fmt.Errorf("%s: %w", tm.Kind, err)
		}
		return nil
	}
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		return decodeInto(strict, &r.Deployments)
	case "v1 Service":
		return decodeInto(strict, &r.Services)
	case "v1 ConfigMap":
		return decodeInto(strict, &r.ConfigMaps)
	case "v1 Secret":
		return decodeInto(strict, &r.Secrets)
	case "batch/v1 Job":
		return decodeInto(strict, &r.Jobs)
	case "policy/v1 PodDisruptionBudget":
		return decodeInto(strict, &r.PDBs)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return decodeInto(strict, &r.HPAs)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return decodeInto(strict, &r.ServiceMonitors)
	}
	return fmt.Errorf("unexpected object %s %s", tm.APIVersion, tm.Kind)
}

func decodeInto[T any](strict func(any) error, list *[]*T) error {
	v := new(T)
	if err := strict(v); err != nil {
		return err
	}
	*list = append(*list, v)
	return nil
}

// deployment is the one Deployment, and its one container.
func (r *rendered) deployment(t *testing.T) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	if len(r.Deployments) != 1 || len(r.Deployments[0].Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one Deployment with one container, got %d", len(r.Deployments))
	}
	d := r.Deployments[0]
	return d, &d.Spec.Template.Spec.Containers[0]
}

func (r *rendered) configMap(name string) *corev1.ConfigMap {
	for _, cm := range r.ConfigMaps {
		if cm.Name == name {
			return cm
		}
	}
	return nil
}

func (r *rendered) secret(name string) *corev1.Secret {
	for _, s := range r.Secrets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// ciValues is a values file of the chart's ci/ folder.
func ciValues(name string) string { return filepath.Join(chartDir, "ci", name) }

// writeValues writes a values file for one test.
func writeValues(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// copyChart copies the chart to a temp folder a test may change.
func copyChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "ctxproxy")
	err := filepath.Walk(chartDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(chartDir, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
