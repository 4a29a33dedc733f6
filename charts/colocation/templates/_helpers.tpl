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

{{- /*
store.type=nats: the operator's flags, and the read-only mounts of the CA (ca.crt of
store.nats.tlsSecret, never its key) and of its password (manifests/components/nats-store).
With store.nats.deploy it connects to the deployed servers' Service.
*/}}
{{- define "colocation.natsServers" -}}
{{- if .Values.store.nats.deploy -}}
{{- list "tls://colocation-nats.colocation-system.svc:4222" | toJson -}}
{{- else -}}
{{- .Values.store.nats.servers | toJson -}}
{{- end -}}
{{- end }}

{{- define "colocation.natsArgs" -}}
{{- $nats := .Values.store.nats -}}
- --store=nats
{{- range include "colocation.natsServers" . | fromJsonArray }}
- --nats-server={{ . }}
{{- end }}
{{- if $nats.tlsSecret }}
- --nats-ca-file=/etc/colocation/nats-ca/ca.crt
{{- end }}
{{- if $nats.user }}
- --nats-user={{ $nats.user }}
- --nats-password-file=/etc/colocation/nats-password/password
{{- end }}
- --nats-storage={{ $nats.storage }}
- --nats-replicas={{ $nats.replicas }}
{{- if gt (int $nats.evaluationShards) 1 }}
- --evaluation-shards={{ $nats.evaluationShards }}
{{- end }}
{{- end }}

{{- define "colocation.natsMounts" -}}
{{- if .Values.store.nats.tlsSecret }}
- name: nats-ca
  mountPath: /etc/colocation/nats-ca
  readOnly: true
{{- end }}
{{- if .Values.store.nats.user }}
- name: nats-password
  mountPath: /etc/colocation/nats-password
  readOnly: true
{{- end }}
{{- end }}

{{- define "colocation.natsVolumes" -}}
{{- if .Values.store.nats.tlsSecret }}
- name: nats-ca
  secret:
    secretName: {{ .Values.store.nats.tlsSecret }}
    # The CA only: the servers' private key stays out of the operator's pods.
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- if .Values.store.nats.user }}
- name: nats-password
  secret:
    secretName: {{ .Values.store.nats.passwordSecret }}
    items:
      - key: password
        path: password
{{- end }}
{{- end }}
