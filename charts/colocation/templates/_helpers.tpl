{{/*
Labels of every object: manifests/kustomization.yaml's two, and Helm's own. Pod templates get only
the first two (colocation.podLabels): a rollout must not follow a chart version bump.
*/}}
{{- define "colocation.labels" -}}
{{ include "colocation.podLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "colocation.podLabels" -}}
app.kubernetes.io/name: colocation
app.kubernetes.io/part-of: colocation
{{- end }}

{{/* The image both workloads run. */}}
{{- define "colocation.image" -}}
image: {{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end }}

{{/*
The operator's leader election flags that were given (null keeps the operator's default), after
checking them as the operator would, so a bad combination fails at `helm install`, not in a
crash-looping pod.
*/}}
{{- define "colocation.leaseArgs" -}}
{{- $le := .Values.operator.leaderElection -}}
{{- $duration := $le.leaseDuration | default 15.0 | float64 -}}
{{- $deadline := $le.renewDeadline | default 10.0 | float64 -}}
{{- $retry := $le.retryPeriod | default 2.0 | float64 -}}
{{- if not (and (gt $duration $deadline) (gt $deadline $retry)) -}}
{{- fail (printf "operator.leaderElection: need leaseDuration > renewDeadline > retryPeriod, got %v > %v > %v (null is the operator's default: 15, 10, 2)" $duration $deadline $retry) -}}
{{- end -}}
{{- if not (kindIs "invalid" $le.leaseDuration) }}
- --lease-duration
- {{ $le.leaseDuration | quote }}
{{- end }}
{{- if not (kindIs "invalid" $le.renewDeadline) }}
- --renew-deadline
- {{ $le.renewDeadline | quote }}
{{- end }}
{{- if not (kindIs "invalid" $le.retryPeriod) }}
- --retry-period
- {{ $le.retryPeriod | quote }}
{{- end }}
{{- end }}

{{- /*
The agent's user: non-root by default; root with features.nodeQoSEnforcement, because cgroup files
belong to root (it still keeps no capability, no privilege escalation, a read-only root filesystem).
*/}}
{{- define "colocation.agentUser" -}}
{{- if .Values.features.nodeQoSEnforcement -}}
runAsNonRoot: false
runAsUser: 0
runAsGroup: 0
{{- else -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
{{- end -}}
{{- end }}
