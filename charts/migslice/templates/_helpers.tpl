{{/*
Labels of every object. Call with (dict "ctx" $ "component" "webhook").
*/}}
{{- define "migslice.labels" -}}
{{ include "migslice.selectorLabels" . }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: migslice
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
Selector labels (stable across upgrades: Deployment selectors are immutable).
*/}}
{{- define "migslice.selectorLabels" -}}
app.kubernetes.io/name: migslice
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
The migslice image.
*/}}
{{- define "migslice.image" -}}
{{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
kube-scheduler's image: the cluster's version unless scheduler.image.tag is set.
*/}}
{{- define "migslice.schedulerImage" -}}
{{- $tag := .Values.scheduler.image.tag -}}
{{- if not $tag -}}
{{- $v := semver .Capabilities.KubeVersion.Version -}}
{{- $tag = printf "v%d.%d.%d" $v.Major $v.Minor $v.Patch -}}
{{- end -}}
{{ printf "%s:%s" .Values.scheduler.image.repository $tag }}
{{- end }}

{{/*
Namespaces the webhook never admits: the configured ones, the release namespace and the GPU
Operator's, each once, in order.
*/}}
{{- define "migslice.excludedNamespaces" -}}
{{- $all := concat .Values.webhook.excludeNamespaces (list .Release.Namespace .Values.gpuOperator.namespace) -}}
{{- uniq $all | join "," -}}
{{- end }}

{{/*
Fail-open namespaces exist (docs/outages.md): outage.failOpen.enabled, on Kubernetes 1.36+
where MutatingAdmissionPolicy is GA. "true", or "" when not.
*/}}
{{- define "migslice.failOpen" -}}
{{- if and .Values.outage.failOpen.enabled (semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end -}}
{{- end }}

{{/*
The webhook's gate reconciler runs, with its RBAC, its Lease and the policies that keep the
gate its own (migslice-admission-gate-owner, migslice-webhook-pod-writes): on Kubernetes 1.36+,
whatever outage.failOpen.enabled says. Pods put behind the gate migslice.io/admission while
fail-open was on (an earlier revision) keep it until the webhook admits them; a release
upgraded or rolled back to fail-open off must still admit them, or they wait gated forever
(docs/outages.md, "Turning fail-open off"). "true", or "" when not.
*/}}
{{- define "migslice.gateReconciler" -}}
{{- if semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version -}}
true
{{- end -}}
{{- end }}

{{/*
matchExpressions of the namespaces the webhook admits: not excluded, not opted out.
*/}}
{{- define "migslice.admittedNamespaces" -}}
- key: kubernetes.io/metadata.name
  operator: NotIn
  values: {{ include "migslice.excludedNamespaces" . | splitList "," | toJson }}
- key: migslice.io/admission
  operator: NotIn
  values: [disabled]
{{- end }}

{{/*
CEL: the pod asks for a GPU (a migslice.io/gpu-* annotation, or an nvidia.com/* resource or a
DeviceClass's implicit extended resource deviceclass.resource.kubernetes.io/<class> (KEP-5004:
any class serves one, NVIDIA's and migslice's too) in a container or init container): what the
webhook is sent, and what the admission gate is put on.
Call with the variable that holds the pod: (include "migslice.asksForAGpu" "object").
*/}}
{{- define "migslice.asksForAGpu" -}}
(has({{ . }}.metadata.annotations) &&
 {{ . }}.metadata.annotations.exists(k, k.startsWith('migslice.io/gpu-'))) ||
{{ . }}.spec.containers.exists(c, has(c.resources) &&
  ((has(c.resources.limits) && c.resources.limits.exists(r, (r.startsWith('nvidia.com/') || r.startsWith('deviceclass.resource.kubernetes.io/')))) ||
   (has(c.resources.requests) && c.resources.requests.exists(r, (r.startsWith('nvidia.com/') || r.startsWith('deviceclass.resource.kubernetes.io/')))))) ||
(has({{ . }}.spec.initContainers) && {{ . }}.spec.initContainers.exists(c, has(c.resources) &&
  ((has(c.resources.limits) && c.resources.limits.exists(r, (r.startsWith('nvidia.com/') || r.startsWith('deviceclass.resource.kubernetes.io/')))) ||
   (has(c.resources.requests) && c.resources.requests.exists(r, (r.startsWith('nvidia.com/') || r.startsWith('deviceclass.resource.kubernetes.io/')))))))
{{- end }}

{{/*
CEL: the annotations a pod asks by size with (migslice/names.py INPUT_ANNOTATIONS), a list.
*/}}
{{- define "migslice.inputAnnotations" -}}
["migslice.io/gpu-size", "migslice.io/gpu-memory", "migslice.io/gpu-compute", "migslice.io/gpu-count", "migslice.io/gpu-container"]
{{- end }}

{{/*
CEL: the pod carries the admission gate. Call with the variable: (include "migslice.gated" "object").
*/}}
{{- define "migslice.gated" -}}
has({{ . }}.spec.schedulingGates) && {{ . }}.spec.schedulingGates.exists(g, g.name == 'migslice.io/admission')
{{- end }}

{{/*
The pod and container security contexts of migslice's own containers: non-root 65532,
read-only root filesystem, no capabilities, RuntimeDefault seccomp.
*/}}
{{- define "migslice.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "migslice.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
What every migslice container gets: HOME and a writable /tmp (the root filesystem is
read-only). Volume and mount, respectively.
*/}}
{{- define "migslice.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end }}

{{- define "migslice.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- end }}

{{/*
Spread replicas over nodes (best effort: a small cluster still gets every replica).
*/}}
{{- define "migslice.spread" -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "migslice.selectorLabels" . | nindent 8 }}
{{- end }}

{{/*
nodeSelector, tolerations and affinity of a component's values, when set (may be empty).
*/}}
{{- define "migslice.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "migslice.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The certificate Jobs' RBAC exists only while the Jobs run (Helm hooks around them).
*/}}
{{- define "migslice.certsHookAnnotations" -}}
helm.sh/hook: pre-install,pre-upgrade,pre-rollback,post-install,post-upgrade,post-rollback
helm.sh/hook-weight: "-10"
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/*
The client certificates the certificate Jobs (or cert-manager) keep, per server: a list of
(dict "name" <the name it carries> "secret" <its Secret>). The extender's is migslice-scheduler's
(extender.clientAuth); the webhook's kube-apiserver's (webhook.clientAuth.enabled or
issueCertificate). Call with (dict "ctx" $ "service" "webhook"); renders YAML, read it back
with fromYamlArray.
*/}}
{{- define "migslice.clientCertificates" -}}
{{- $values := .ctx.Values -}}
{{- $found := list -}}
{{- if and (eq .service "extender") $values.extender.clientAuth.enabled -}}
{{- $found = append $found (dict "name" "migslice-scheduler" "secret" "migslice-extender-client") -}}
{{- end -}}
{{- if and (eq .service "webhook") (or $values.webhook.clientAuth.enabled $values.webhook.clientAuth.issueCertificate) -}}
{{- $found = append $found (dict "name" $values.webhook.clientAuth.clientName "secret" "migslice-webhook-client") -}}
{{- end -}}
{{- toYaml $found -}}
{{- end }}

{{/*
agent.devicePluginLabels as a label selector (key=value,...), the carving agent's
--device-plugin-selector.
*/}}
{{- define "migslice.devicePluginSelector" -}}
{{- $pairs := list -}}
{{- range $key, $value := .Values.agent.devicePluginLabels -}}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end }}

{{/*
The cleanup hook runs (cleanup.enabled): "true", or "" when not. Not with createNamespace: the
release namespace is one of the release's objects then, deleted by helm uninstall before a
post-delete hook could run a Job in it (run `migslice cleanup` by hand there, as after
`kubectl delete -k manifests`, which is rendered with createNamespace).
*/}}
{{- define "migslice.cleanupHook" -}}
{{- if and .Values.cleanup.enabled (not .Values.createNamespace) -}}
true
{{- end -}}
{{- end }}

{{/*
The cleanup Job's account, RBAC and policies exist only while it runs, after the release's own
objects are gone (Helm hooks around it).
*/}}
{{- define "migslice.cleanupHookAnnotations" -}}
helm.sh/hook: post-delete
helm.sh/hook-weight: "-10"
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/*
A Go duration (tls.certManager's: 2160h, 1h30m, 90m) in seconds, a float.
*/}}
{{- define "migslice.durationSeconds" -}}
{{- $seconds := 0.0 -}}
{{- $units := dict "ns" 1e-9 "us" 1e-6 "ms" 1e-3 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- range regexFindAll "[0-9.]+(ns|us|ms|s|m|h)" . -1 -}}
{{- $unit := regexFind "(ns|us|ms|s|m|h)$" . -}}
{{- $seconds = addf $seconds (mulf (float64 (trimSuffix $unit .)) (get $units $unit)) -}}
{{- end -}}
{{- $seconds -}}
{{- end }}

{{/*
cert-manager refuses a Certificate whose duration is under 1h, or whose renewBefore is under
5m or not under its duration (its webhook, at install: after the webhook configurations and
Deployments are made). Say so at render time, naming the values. Call with
(dict "ctx" $ "duration" "duration" "renewBefore" "renewBefore"): the keys of
tls.certManager.
*/}}
{{- define "migslice.checkCertificateLifetime" -}}
{{- $values := .ctx.Values.tls.certManager -}}
{{- $duration := include "migslice.durationSeconds" (get $values .duration) | float64 -}}
{{- $renew := include "migslice.durationSeconds" (get $values .renewBefore) | float64 -}}
{{- if lt $duration 3600.0 -}}
{{- fail (printf "tls.certManager.%s=%s is under 1h, which cert-manager refuses" .duration (get $values .duration)) -}}
{{- end -}}
{{- if lt $renew 300.0 -}}
{{- fail (printf "tls.certManager.%s=%s is under 5m, which cert-manager refuses" .renewBefore (get $values .renewBefore)) -}}
{{- end -}}
{{- if ge $renew $duration -}}
{{- fail (printf "tls.certManager.%s=%s must be under tls.certManager.%s=%s: cert-manager refuses a certificate renewed before it is issued" .renewBefore (get $values .renewBefore) .duration (get $values .duration)) -}}
{{- end -}}
{{- end }}
