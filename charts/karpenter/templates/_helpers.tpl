{{/* The chart's name. */}}
{{- define "karpenter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name: the release name when it already says
"karpenter" (`helm install karpenter`), else "<release>-karpenter".
*/}}
{{- define "karpenter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The name of one service's objects: "<fullname>-<component>". */}}
{{- define "karpenter.componentName" -}}
{{- printf "%s-%s" (include "karpenter.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "karpenter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "karpenter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpenter.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Labels of every object of one component. */}}
{{- define "karpenter.labels" -}}
helm.sh/chart: {{ include "karpenter.chart" .root }}
{{ include "karpenter.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- with .root.Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "karpenter.annotations" -}}
{{- with .Values.additionalAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The provider's service account: the release's full name, as IRSA expects. */}}
{{- define "karpenter.providerServiceAccount" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "karpenter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The services' image. None is published: the user builds it
(scripts/build-image) and names it, or the chart refuses to render.
*/}}
{{- define "karpenter.image" -}}
{{- $repository := required "image.repository is not set: no registry publishes this chart's image. Build it with scripts/build-image, push it where the cluster pulls from, and set image.repository and image.tag (or image.digest), e.g. --set image.repository=registry.example.com/karpenter --set image.tag=0.1.0" .Values.image.repository }}
{{- $tag := .Values.image.tag | default .Chart.AppVersion | toString }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" $repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}
{{- end }}

{{/*
"true" when controller.image is Karpenter's own controller image (the
default of Karpenter's values file, public.ecr.aws/karpenter/controller,
or a mirror of it): that image holds no adapter.
*/}}
{{- define "karpenter.upstreamControllerImage" -}}
{{- if regexMatch "(^|/)karpenter/controller$" (toString .Values.controller.image.repository) }}true{{ end }}
{{- end }}

{{/*
The adapter's image: controller.image when it names one (and not
Karpenter's own controller image, which NOTES.txt then names as passed
over), else the services' image.
*/}}
{{- define "karpenter.adapterImage" -}}
{{- $image := .Values.controller.image }}
{{- if include "karpenter.upstreamControllerImage" . }}
{{- include "karpenter.image" . }}
{{- else if $image.repository }}
{{- $tag := $image.tag | default .Chart.AppVersion | toString }}
{{- if $image.digest }}
{{- printf "%s:%s@%s" $image.repository $tag $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository $tag }}
{{- end }}
{{- else if or $image.tag $image.digest }}
{{- fail "controller.image.tag and controller.image.digest need controller.image.repository (image.tag and image.digest set every service's)" }}
{{- else }}
{{- include "karpenter.image" . }}
{{- end }}
{{- end }}

{{/* http or https, as the services speak to each other. */}}
{{- define "karpenter.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end }}
{{- end }}

{{- define "karpenter.schedulerAddress" -}}
{{- printf "%s://%s.%s.svc:50051" (include "karpenter.scheme" .) (include "karpenter.componentName" (dict "root" . "component" "scheduler")) .Release.Namespace }}
{{- end }}

{{- define "karpenter.providerAddress" -}}
{{- printf "%s://%s.%s.svc:50051" (include "karpenter.scheme" .) (include "karpenter.componentName" (dict "root" . "component" "provider")) .Release.Namespace }}
{{- end }}

{{/*
The Secret holding one service's certificate (tls.crt, tls.key, ca.crt):
the one you named in tls.secretName (shared by the three services), else
"<fullname>-<component>-tls" (cert-manager's or the chart's own).
*/}}
{{- define "karpenter.tlsSecret" -}}
{{- if .root.Values.tls.secretName }}
{{- .root.Values.tls.secretName }}
{{- else }}
{{- printf "%s-tls" (include "karpenter.componentName" .) }}
{{- end }}
{{- end }}

{{/* The DNS names one service's certificate carries (its identity). */}}
{{- define "karpenter.tlsNames" -}}
{{- $name := include "karpenter.componentName" . }}
{{- list $name (printf "%s.%s.svc" $name .root.Release.Namespace) (printf "%s.%s.svc.cluster.local" $name .root.Release.Namespace) | toJson }}
{{- end }}

{{/*
The TLS flags of a service. The scheduler and the provider answer only the
client identities of tls.clientAllow.<component> (default: the adapter's
certificate name).
*/}}
{{- define "karpenter.tlsArgs" -}}
{{- if .root.Values.tls.enabled }}
- --tls-cert=/etc/karpenter/tls/tls.crt
- --tls-key=/etc/karpenter/tls/tls.key
- --tls-ca=/etc/karpenter/tls/ca.crt
{{- if ne .component "adapter" }}
{{- $allow := index .root.Values.tls.clientAllow .component }}
{{- if not $allow }}
{{- $allow = list (include "karpenter.componentName" (dict "root" .root "component" "adapter")) }}
{{- end }}
- --tls-client-allow={{ join "," $allow }}
{{- end }}
{{- end }}
{{- end }}

{{- define "karpenter.tlsVolumeMounts" -}}
{{- if .root.Values.tls.enabled }}
- name: tls
  mountPath: /etc/karpenter/tls
  readOnly: true
{{- end }}
{{- end }}

{{- define "karpenter.tlsVolumes" -}}
{{- if .root.Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "karpenter.tlsSecret" . }}
{{- end }}
{{- end }}

{{/*
extraVolumes, in the pods of upstream's controller (the adapter and the
provider), for their init containers and the adapter's extra mounts.
*/}}
{{- define "karpenter.extraVolumes" -}}
{{- range .Values.extraVolumes }}
{{- if has .name (list "tls" "catalog") }}
{{- fail (printf "extraVolumes: the name %q is the chart's own volume; name yours otherwise" .name) }}
{{- end }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* A Service's annotations: additionalAnnotations and service.annotations. */}}
{{- define "karpenter.serviceAnnotations" -}}
{{- with (merge (deepCopy .Values.service.annotations) .Values.additionalAnnotations) }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The NetworkPolicy of the scheduler or the provider: only the adapter
calls its gRPC port; its metrics are open to networkPolicy.metricsFrom.
With hostNetwork the adapter's calls come from its node's address, which
no pod selector matches: the gRPC port is then open, and mutual TLS alone
keeps other callers out.
*/}}
{{- define "karpenter.networkPolicy" -}}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "karpenter.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "karpenter.labels" . | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "karpenter.selectorLabels" . | nindent 6 }}
  policyTypes:
    - Ingress
  ingress:
    - ports:
        - port: grpc
          protocol: TCP
      {{- if not .root.Values.hostNetwork }}
      from:
        - podSelector:
            matchLabels:
              {{- include "karpenter.selectorLabels" (dict "root" .root "component" "adapter") | nindent 14 }}
      {{- end }}
    - ports:
        - port: http-metrics
          protocol: TCP
      {{- with .root.Values.networkPolicy.metricsFrom }}
      from:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}

{{/* OpenTelemetry: where traces go, and the service's name in them. */}}
{{- define "karpenter.telemetryEnv" -}}
{{- if .root.Values.telemetry.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .root.Values.telemetry.otlpEndpoint | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ printf "karpenter-%s" .component | quote }}
{{- end }}
{{- end }}

{{/* The container security context of every service. */}}
{{- define "karpenter.containerSecurityContext" -}}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
The adapter's: every service's, with controller.securityContext's
AppArmor, SELinux and seccomp profiles where set.
*/}}
{{- define "karpenter.adapterSecurityContext" -}}
{{- $context := include "karpenter.containerSecurityContext" . | fromYaml }}
{{- with .Values.controller.securityContext.appArmorProfile }}
{{- $_ := set $context "appArmorProfile" . }}
{{- end }}
{{- with .Values.controller.securityContext.seLinuxOptions }}
{{- $_ := set $context "seLinuxOptions" . }}
{{- end }}
{{- with .Values.controller.securityContext.seccompProfile }}
{{- $_ := set $context "seccompProfile" . }}
{{- end }}
{{- toYaml $context }}
{{- end }}

{{/*
LOG_OUTPUT_PATHS from logOutputPaths: the adapter writes its logs to one
place (stdout, stderr or a file on a mounted volume).
*/}}
{{- define "karpenter.logOutputPath" -}}
{{- if gt (len .Values.logOutputPaths) 1 }}
{{- fail (printf "logOutputPaths: the adapter writes its logs to one place (stdout, stderr or a file), not %s" (join ", " .Values.logOutputPaths)) }}
{{- end }}
{{- first .Values.logOutputPaths }}
{{- end }}

{{/*
Karpenter's controller.sidecarContainer, beside the adapter: each with its
own volume mounts, controller.extraVolumeMounts and
controller.sidecarVolumeMounts.
*/}}
{{- define "karpenter.sidecarContainers" -}}
{{- $controller := .Values.controller }}
{{- range $controller.sidecarContainer }}
{{- $mounts := concat (.volumeMounts | default list) ($controller.extraVolumeMounts | default list) ($controller.sidecarVolumeMounts | default list) }}
{{- $sidecar := omit . "volumeMounts" }}
{{- if $mounts }}
{{- $_ := set $sidecar "volumeMounts" $mounts }}
{{- end }}
- {{- toYaml $sidecar | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The affinity of a component: its own, else the chart's, with every pod
(anti-)affinity term that names no pods made about the component's pods.
*/}}
{{- define "karpenter.affinity" -}}
{{- $affinity := deepCopy (default .root.Values.affinity .own) }}
{{- $selector := fromYaml (include "karpenter.selectorLabels" .) }}
{{- range $kind := list "podAffinity" "podAntiAffinity" }}
{{- with (get $affinity $kind) }}
{{- range $term := (get . "requiredDuringSchedulingIgnoredDuringExecution" | default list) }}
{{- if not (hasKey $term "labelSelector") }}
{{- $_ := set $term "labelSelector" (dict "matchLabels" $selector) }}
{{- end }}
{{- end }}
{{- range $weighted := (get . "preferredDuringSchedulingIgnoredDuringExecution" | default list) }}
{{- $term := get $weighted "podAffinityTerm" }}
{{- if and $term (not (hasKey $term "labelSelector")) }}
{{- $_ := set $term "labelSelector" (dict "matchLabels" $selector) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $affinity }}
{{- end }}

{{/* Spread constraints about the component's own pods. */}}
{{- define "karpenter.topologySpreadConstraints" -}}
{{- $selector := fromYaml (include "karpenter.selectorLabels" .) }}
{{- $constraints := list }}
{{- range (deepCopy .root.Values.topologySpreadConstraints) }}
{{- if not (hasKey . "labelSelector") }}
{{- $_ := set . "labelSelector" (dict "matchLabels" $selector) }}
{{- end }}
{{- $constraints = append $constraints . }}
{{- end }}
{{- toYaml $constraints }}
{{- end }}

{{/*
The pod spec fields every service shares: identity, placement and
security. Takes (dict "root" . "component" NAME "own" SERVICE_VALUES "serviceAccount" NAME "automount" BOOL).
*/}}
{{- define "karpenter.podCommon" -}}
{{- /* Upstream's controller pod became the adapter (its Kubernetes side)
and the provider (its cloud side): both run its init containers. */}}
{{- $controllerPod := has .component (list "adapter" "provider") }}
{{- $hostNetwork := and (eq .component "adapter") .root.Values.hostNetwork -}}
serviceAccountName: {{ .serviceAccount }}
automountServiceAccountToken: {{ .automount }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
priorityClassName: {{ .root.Values.priorityClassName | quote }}
{{- with .root.Values.schedulerName }}
schedulerName: {{ . | quote }}
{{- end }}
{{- if $hostNetwork }}
hostNetwork: true
{{- end }}
{{- /* On the host network, ClusterFirst would resolve with the node's DNS,
where the scheduler's and provider's Service names are unknown. */}}
dnsPolicy: {{ if and $hostNetwork (eq .root.Values.dnsPolicy "ClusterFirst") }}ClusterFirstWithHostNet{{ else }}{{ .root.Values.dnsPolicy }}{{ end }}
{{- with .root.Values.dnsConfig }}
dnsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.terminationGracePeriodSeconds }}
terminationGracePeriodSeconds: {{ . }}
{{- end }}
{{- if $controllerPod }}
{{- with .root.Values.initContainers }}
initContainers:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with (default .root.Values.nodeSelector .own.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
  {{- include "karpenter.affinity" (dict "root" .root "component" .component "own" .own.affinity) | nindent 2 }}
{{- with (include "karpenter.topologySpreadConstraints" .) | fromYamlArray }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default .root.Values.tolerations .own.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* FEATURE_GATES from settings.featureGates: NodeRepair=false,... */}}
{{- define "karpenter.featureGates" -}}
{{- $gates := list }}
{{- range $name, $on := .Values.settings.featureGates }}
{{- $gates = append $gates (printf "%s=%t" (title $name) $on) }}
{{- end }}
{{- join "," $gates }}
{{- end }}

{{/* The node class kind the provider serves: group and resource. */}}
{{- define "karpenter.nodeClass" -}}
{{- if eq .Values.provider.kind "aws" }}
group: karpenter.k8s.aws
resource: ec2nodeclasses
{{- else if eq .Values.provider.kind "kwok" }}
group: karpenter.kwok.sh
resource: kwoknodeclasses
{{- else }}
group: {{ required "provider.custom.nodeClass.group is required with provider.kind custom" .Values.provider.custom.nodeClass.group }}
resource: {{ required "provider.custom.nodeClass.resource is required with provider.kind custom" .Values.provider.custom.nodeClass.resource }}
{{- end }}
{{- end }}
