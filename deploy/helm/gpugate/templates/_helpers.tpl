{{/* The release's name for gpugate's objects: the release name when it
names gpugate already, else <release>-gpugate. */}}
{{- define "gpugate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 53 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 53 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 53 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpugate.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "gpugate.labels" -}}
app.kubernetes.io/name: {{ include "gpugate.fullname" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gpugate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpugate.fullname" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* metadata.labels and annotations of every object. */}}
{{- define "gpugate.metadata" -}}
labels:
  {{- include "gpugate.labels" . | nindent 2 }}
{{- with .Values.global.annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* An image reference from {registry, repository, tag} and a default tag. */}}
{{- define "gpugate.image" -}}
{{- $image := .image | default dict -}}
{{- $registry := $image.registry | default (.global | default dict).imageRegistry -}}
{{- $ref := $image.repository | default .repository -}}
{{- if $registry }}{{ $ref = printf "%s/%s" $registry $ref }}{{ end -}}
{{- printf "%s:%s" $ref ($image.tag | default .tag) -}}
{{- end -}}

{{/* The cluster's version as an image tag: v1.36.3 of v1.36.3-eks-1a2b or
v1.36.3+k3s1. */}}
{{- define "gpugate.kubeTag" -}}
{{- regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version -}}
{{- end -}}

{{/* The NVIDIA section of gpugate's config: the resource names from the
values, then device-config.content's nvidia section over them. */}}
{{- define "gpugate.nvidia" -}}
{{- $nvidia := dict
  "resourceCountName" .Values.resourceName
  "resourceMemoryName" .Values.resourceMem
  "resourceMemoryPercentageName" .Values.resourceMemPercentage
  "resourceCoreName" .Values.resourceCores
  "resourcePriorityName" .Values.resourcePriority -}}
{{- with (dig "nvidia" "gpuCorePolicy" "" (.Values.devices | default dict)) }}{{ $_ := set $nvidia "gpuCorePolicy" . }}{{ end -}}
{{- if eq (toString .Values.scheduler.overwriteEnv) "true" }}{{ $_ := set $nvidia "overwriteEnv" true }}{{ end -}}
{{- with (dig "runtimeClassName" "" (.Values.devicePlugin | default dict)) }}{{ $_ := set $nvidia "runtimeClassName" . }}{{ end -}}
{{- $known := include "gpugate.nvidiaKeys" . | fromJsonArray -}}
{{- range $k, $v := include "gpugate.contentNvidia" . | fromJson -}}
{{- if has $k $known }}{{ $_ := set $nvidia $k $v }}{{ end -}}
{{- end -}}
{{- toYaml $nvidia -}}
{{- end -}}

{{/* device-config.content's hygon section when it names HAMi master's
HCUs (hygon.com/hcu...), else nothing. */}}
{{- define "gpugate.contentHcu" -}}
{{- $c := include "gpugate.contentSection" (list . "hygon") | fromJson -}}
{{- if hasPrefix "hygon.com/hcu" (toString ($c.resourceCountName | default "")) }}{{ toJson $c }}{{ else }}{}{{ end -}}
{{- end -}}

{{/* The Hygon DCU section of gpugate's config: HAMi's dcuResource* values,
then device-config.content's hygon section over them (HAMi's chart writes
memoryFactor there) unless that section names HCUs. */}}
{{- define "gpugate.hygon" -}}
{{- $hygon := dict
  "resourceCountName" .Values.dcuResourceName
  "resourceMemoryName" .Values.dcuResourceMem
  "resourceCoreName" .Values.dcuResourceCores -}}
{{- $known := list "resourceCountName" "resourceMemoryName" "resourceCoreName" "memoryFactor" -}}
{{- if eq (include "gpugate.contentHcu" .) "{}" -}}
{{- range $k, $v := include "gpugate.contentSection" (list . "hygon") | fromJson -}}
{{- if has $k $known }}{{ $_ := set $hygon $k $v }}{{ end -}}
{{- end -}}
{{- end -}}
{{- toYaml $hygon -}}
{{- end -}}

{{/* The Hygon HCU section of gpugate's config: HAMi master's
devices.hygon values, then device-config.content's hygon section over
them when it names HCUs. */}}
{{- define "gpugate.hcu" -}}
{{- $v := dig "hygon" dict (.Values.devices | default dict) -}}
{{- $hcu := dict
  "resourceCountName" ($v.resourceCountName | default "hygon.com/hcunum")
  "resourceMemoryName" ($v.resourceMemoryName | default "hygon.com/hcumem")
  "resourceCoreName" ($v.resourceCoreName | default "hygon.com/hcucores")
  "memoryFactor" ($v.memoryFactor | default 1 | int) -}}
{{- $known := list "resourceCountName" "resourceMemoryName" "resourceCoreName" "memoryFactor" -}}
{{- range $k, $val := include "gpugate.contentHcu" . | fromJson -}}
{{- if has $k $known }}{{ $_ := set $hcu $k $val }}{{ end -}}
{{- end -}}
{{- toYaml $hcu -}}
{{- end -}}

{{/* The Kunlunxin section of gpugate's config (whole XPUs and vXPUs):
HAMi's kunlunResource* values, then device-config.content's kunlun section
over them (HAMi's key names). */}}
{{- define "gpugate.kunlun" -}}
{{- $k := dict
  "resourceCountName" .Values.kunlunResourceName
  "resourceVCountName" .Values.kunlunResourceVCountName
  "resourceVMemoryName" .Values.kunlunResourceVMemoryName -}}
{{- $known := list "resourceCountName" "resourceVCountName" "resourceVMemoryName" -}}
{{- range $key, $v := include "gpugate.contentSection" (list . "kunlun") | fromJson -}}
{{- if has $key $known }}{{ $_ := set $k $key $v }}{{ end -}}
{{- end -}}
{{- toYaml $k -}}
{{- end -}}

{{/* The Cambricon MLU section of gpugate's config: HAMi's mluResource*
values, then device-config.content's cambricon section over them. */}}
{{- define "gpugate.cambricon" -}}
{{- $m := dict
  "resourceCountName" .Values.mluResourceName
  "resourceMemoryName" .Values.mluResourceMem
  "resourceCoreName" .Values.mluResourceCores -}}
{{- $known := list "resourceCountName" "resourceMemoryName" "resourceCoreName" -}}
{{- range $key, $v := include "gpugate.contentSection" (list . "cambricon") | fromJson -}}
{{- if has $key $known }}{{ $_ := set $m $key $v }}{{ end -}}
{{- end -}}
{{- toYaml $m -}}
{{- end -}}

{{/* The AWS Neuron section of gpugate's config: HAMi's chart literals,
then device-config.content's awsneuron section over them. */}}
{{- define "gpugate.awsneuron" -}}
{{- $a := dict
  "resourceCountName" "aws.amazon.com/neuron"
  "resourceCoreName" "aws.amazon.com/neuroncore" -}}
{{- $known := list "resourceCountName" "resourceCoreName" -}}
{{- range $key, $v := include "gpugate.contentSection" (list . "awsneuron") | fromJson -}}
{{- if has $key $known }}{{ $_ := set $a $key $v }}{{ end -}}
{{- end -}}
{{- toYaml $a -}}
{{- end -}}

{{/* The Biren section of gpugate's config: HAMi's birenResourceName,
then device-config.content's biren section over it. */}}
{{- define "gpugate.biren" -}}
{{- $b := dict "resourceCountName" .Values.birenResourceName -}}
{{- with (include "gpugate.contentSection" (list . "biren") | fromJson).resourceCountName }}{{ $_ := set $b "resourceCountName" . }}{{ end -}}
{{- toYaml $b -}}
{{- end -}}

{{/* The Metax section of gpugate's config: whole GPUs (HAMi's chart
literal) and sGPUs (HAMi's metaxResource* values), then
device-config.content's metax section over them. */}}
{{- define "gpugate.metax" -}}
{{- $m := dict "resourceCountName" "metax-tech.com/gpu" "resourceVCountName" .Values.metaxResourceName "resourceVMemoryName" .Values.metaxResourceMem "resourceVCoreName" .Values.metaxResourceCore -}}
{{- $c := include "gpugate.contentSection" (list . "metax") | fromJson -}}
{{- range $k := list "resourceCountName" "resourceVCountName" "resourceVMemoryName" "resourceVCoreName" }}{{ with index $c $k }}{{ $_ := set $m $k . }}{{ end }}{{ end -}}
{{- toYaml $m -}}
{{- end -}}

{{/* The Enflame section of gpugate's config: whole GCUs (HAMi's chart
literal) and DRS slices (HAMi's enflameResourceName* values), then
device-config.content's enflame section over them. */}}
{{- define "gpugate.enflame" -}}
{{- $e := dict "resourceNameGCU" "enflame.com/gcu" "resourceNameDRSGCU" .Values.enflameResourceNameDRSGCU "resourceNameGCUMemory" .Values.enflameResourceNameGCUMemory "resourceNameGCUCore" .Values.enflameResourceNameGCUCore -}}
{{- $c := include "gpugate.contentSection" (list . "enflame") | fromJson -}}
{{- range $k := list "resourceNameGCU" "resourceNameDRSGCU" "resourceNameGCUMemory" "resourceNameGCUCore" }}{{ with index $c $k }}{{ $_ := set $e $k . }}{{ end }}{{ end -}}
{{- toYaml $e -}}
{{- end -}}

{{/* The Vastai section of gpugate's config: HAMi's vastaiResourceName,
then device-config.content's vastai section over it. */}}
{{- define "gpugate.vastai" -}}
{{- $v := dict "resourceCountName" .Values.vastaiResourceName -}}
{{- with (include "gpugate.contentSection" (list . "vastai") | fromJson).resourceCountName }}{{ $_ := set $v "resourceCountName" . }}{{ end -}}
{{- toYaml $v -}}
{{- end -}}

{{/* The iluvatars section of gpugate's config (Iluvatar GPUs): the chips
of HAMi v2.10's chart, then device-config.content's iluvatars entries over
them, by commonWord. An entry for a chip gpugate does not place fails the
render. */}}
{{- define "gpugate.iluvatars" -}}
{{- $chips := list "MR-V100" "MR-V50" "BI-V150" "BI-V100" -}}
{{- $given := include "gpugate.contentList" (list . "iluvatars") | fromJsonArray -}}
{{- range $g := $given -}}
{{- if not (has (toString $g.commonWord) $chips) -}}
{{- fail (printf "device-config.content iluvatars: commonWord %q is not a chip gpugate places (%s)" (toString $g.commonWord) (join ", " $chips)) -}}
{{- end -}}
{{- end -}}
{{- $out := list -}}
{{- range $cw := $chips -}}
{{- $c := dict "chipName" $cw "commonWord" $cw
  "resourceCountName" (printf "iluvatar.ai/%s-vgpu" $cw)
  "resourceMemoryName" (printf "iluvatar.ai/%s.vMem" $cw)
  "resourceCoreName" (printf "iluvatar.ai/%s.vCore" $cw) -}}
{{- range $g := $given -}}
{{- if eq (toString $g.commonWord) $cw }}{{ $c = mergeOverwrite $c (deepCopy $g) }}{{ end -}}
{{- end -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The AMD section of gpugate's config: HAMi's chart literals, then
device-config.content's amd section over them. */}}
{{- define "gpugate.amd" -}}
{{- $a := dict
  "resourceCountName" "amd.com/gpu"
  "resourceMemoryName" "amd.com/gpumem"
  "resourceCoreName" "amd.com/gpucores" -}}
{{- $known := list "resourceCountName" "resourceMemoryName" "resourceCoreName" -}}
{{- range $key, $v := include "gpugate.contentSection" (list . "amd") | fromJson -}}
{{- if has $key $known }}{{ $_ := set $a $key $v }}{{ end -}}
{{- end -}}
{{- toYaml $a -}}
{{- end -}}

{{/* The Moore Threads section of gpugate's config: HAMi's chart
literals, then device-config.content's mthreads section over them (the
memory and core names are the capacity the GPUs are read from). */}}
{{- define "gpugate.mthreads" -}}
{{- $m := dict
  "resourceCountName" "mthreads.com/vgpu"
  "resourceMemoryName" "mthreads.com/sgpu-memory"
  "resourceCoreName" "mthreads.com/sgpu-core" -}}
{{- $known := list "resourceCountName" "resourceMemoryName" "resourceCoreName" -}}
{{- range $key, $v := include "gpugate.contentSection" (list . "mthreads") | fromJson -}}
{{- if has $key $known }}{{ $_ := set $m $key $v }}{{ end -}}
{{- end -}}
{{- toYaml $m -}}
{{- end -}}

{{/* The Ascend chips gpugate places (HAMi v2.10's chart), by commonWord. */}}
{{- define "gpugate.ascendChips" -}}
["Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4-1", "Ascend910B4", "Ascend310P", "Ascend910C"]
{{- end -}}

{{/* The vnpus section of gpugate's config (Ascend NPUs): HAMi's
devices.ascend.hamiVnpuCore and runtimeClassName and
scheduler.overwriteEnv for every chip, then device-config.content's
vnpus entries over them, by commonWord. An entry for a chip gpugate does
not place fails the render. */}}
{{- define "gpugate.vnpus" -}}
{{- $a := dig "ascend" dict (.Values.devices | default dict) -}}
{{- $content := include "gpugate.contentSection" (list . "vnpus") | fromJson -}}
{{- $chips := include "gpugate.ascendChips" . | fromJsonArray -}}
{{- $given := $content.configs | default list -}}
{{- range $g := $given -}}
{{- if not (has (toString $g.commonWord) $chips) -}}
{{- fail (printf "device-config.content vnpus.configs: commonWord %q is not a chip gpugate places (%s)" (toString $g.commonWord) (join ", " $chips)) -}}
{{- end -}}
{{- end -}}
{{- $configs := list -}}
{{- range $cw := $chips -}}
{{- $c := dict "commonWord" $cw -}}
{{- with $a.runtimeClassName }}{{ $_ := set $c "runtimeClassName" . }}{{ end -}}
{{- if eq (toString $.Values.scheduler.overwriteEnv) "true" }}{{ $_ := set $c "overwriteEnv" true }}{{ end -}}
{{- range $g := $given -}}
{{- if eq (toString $g.commonWord) $cw }}{{ $c = mergeOverwrite $c (deepCopy $g) }}{{ end -}}
{{- end -}}
{{- $configs = append $configs $c -}}
{{- end -}}
{{- $core := $a.hamiVnpuCore | default false -}}
{{- if hasKey $content "hamiVnpuCore" }}{{ $core = $content.hamiVnpuCore }}{{ end -}}
{{- toYaml (dict "hamiVnpuCore" $core "configs" $configs) -}}
{{- end -}}

{{/* Every configured resource name of every device kind, one per line. */}}
{{- define "gpugate.resourceNames" -}}
{{- $n := include "gpugate.nvidia" . | fromYaml -}}
{{- range list "resourceCountName" "resourceMemoryName" "resourceMemoryPercentageName" "resourceCoreName" "resourcePriorityName" }}
{{ index $n . }}
{{- end -}}
{{- range $section := list "gpugate.hygon" "gpugate.hcu" }}
{{- $h := include $section $ | fromYaml -}}
{{- range list "resourceCountName" "resourceMemoryName" "resourceCoreName" }}
{{ index $h . }}
{{- end -}}
{{- end -}}
{{- range $c := (include "gpugate.vnpus" . | fromYaml).configs }}
{{ $c.resourceName | default (printf "huawei.com/%s" $c.commonWord) }}
{{ $c.resourceMemoryName | default (printf "huawei.com/%s-memory" $c.commonWord) }}
{{ $c.resourceCoreName | default (printf "huawei.com/%s-core" $c.commonWord) }}
{{- end -}}
{{- $k := include "gpugate.kunlun" . | fromYaml }}
{{ $k.resourceVCountName }}
{{ $k.resourceVMemoryName }}
{{- $m := include "gpugate.cambricon" . | fromYaml }}
{{ $m.resourceCountName }}
{{ $m.resourceMemoryName }}
{{ $m.resourceCoreName }}
{{- $n := include "gpugate.awsneuron" . | fromYaml }}
{{ $n.resourceCountName }}
{{ $n.resourceCoreName }}
{{- $b := include "gpugate.biren" . | fromYaml }}
{{ $b.resourceCountName }}
{{ $k.resourceCountName }}
{{- $mx := include "gpugate.metax" . | fromYaml }}
{{ $mx.resourceCountName }}
{{- $e := include "gpugate.enflame" . | fromYaml }}
{{ $e.resourceNameGCU }}
{{- $v := include "gpugate.vastai" . | fromYaml }}
{{ $v.resourceCountName }}
{{- range $c := include "gpugate.iluvatars" . | fromJsonArray }}
{{ $c.resourceCountName }}
{{ $c.resourceMemoryName }}
{{ $c.resourceCoreName }}
{{- end -}}
{{- $amd := include "gpugate.amd" . | fromYaml }}
{{ $amd.resourceCountName }}
{{ $amd.resourceMemoryName }}
{{ $amd.resourceCoreName }}
{{- $mt := include "gpugate.mthreads" . | fromYaml }}
{{ $mt.resourceCountName }}
{{ $e.resourceNameDRSGCU }}
{{ $e.resourceNameGCUMemory }}
{{ $e.resourceNameGCUCore }}
{{ $mx.resourceVCountName }}
{{ $mx.resourceVMemoryName }}
{{ $mx.resourceVCoreName }}
{{- end -}}

{{/* The CEL test "resource name r is one of gpugate's": by the domains of
the configured names (nvidia.com/ for HAMi's defaults). */}}
{{- define "gpugate.resourceTest" -}}
{{- $domains := list -}}
{{- range (include "gpugate.resourceNames" . | trim | splitList "\n") -}}
{{- $domains = append $domains (printf "r.startsWith('%s/')" (splitList "/" . | first)) -}}
{{- end -}}
{{- $domains | uniq | join " || " -}}
{{- end -}}

{{/* matchConditions expression: a container or init container asks for
one of gpugate's resources. */}}
{{- define "gpugate.asksForGpus" -}}
{{- $r := include "gpugate.resourceTest" . -}}
object.spec.containers.exists(c, has(c.resources) &&
  ((has(c.resources.limits) && c.resources.limits.exists(r, {{ $r }})) ||
   (has(c.resources.requests) && c.resources.requests.exists(r, {{ $r }}))))
|| (has(object.spec.initContainers) && object.spec.initContainers.exists(c, has(c.resources) &&
  ((has(c.resources.limits) && c.resources.limits.exists(r, {{ $r }})) ||
   (has(c.resources.requests) && c.resources.requests.exists(r, {{ $r }})))))
{{- end -}}

{{/* A HAMi duration (5m, 300s, 1h) in seconds. */}}
{{- define "gpugate.seconds" -}}
{{- $d := toString . -}}
{{- if regexMatch "^[0-9]+$" $d -}}{{ $d }}
{{- else if regexMatch "^[0-9]+s$" $d -}}{{ trimSuffix "s" $d }}
{{- else if regexMatch "^[0-9]+m$" $d -}}{{ mul (trimSuffix "m" $d | atoi) 60 }}
{{- else if regexMatch "^[0-9]+h$" $d -}}{{ mul (trimSuffix "h" $d | atoi) 3600 }}
{{- else -}}{{ fail (printf "scheduler.nodeLockExpire %q: allowed a whole number of s, m or h (e.g. 5m)" $d) }}
{{- end -}}
{{- end -}}

{{/* The admin listener's port from scheduler.metricsBindAddress. */}}
{{- define "gpugate.adminPort" -}}
{{- $p := splitList ":" (toString .Values.scheduler.metricsBindAddress) | last -}}
{{- if not (regexMatch "^[0-9]+$" $p) -}}
{{- fail (printf "scheduler.metricsBindAddress %q: allowed [host]:port" .Values.scheduler.metricsBindAddress) -}}
{{- end -}}
{{- $p -}}
{{- end -}}

{{/* HAMi extender flags, which the chart does not pass on. */}}
{{- define "gpugate.ignoredExtenderArgs" -}}
{{- range .Values.scheduler.extender.extraArgs }}
{{ . }}
{{- end -}}
{{- end -}}

{{/* The extender stanza of a KubeSchedulerConfiguration. */}}
{{- define "gpugate.extender" -}}
- urlPrefix: {{ .urlPrefix }}
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  preemptVerb: preempt
  weight: 10
  nodeCacheCapable: true
  enableHTTPS: true
  tlsConfig:
    caFile: {{ .caFile }}
  httpTimeout: {{ int .root.Values.scheduler.extenderHTTPTimeout }}s
  ignorable: false
  managedResources:
  {{- range (include "gpugate.resourceNames" .root | trim | splitList "\n") }}
    - name: {{ . }}
      ignoredByScheduler: true
  {{- end }}
{{- end -}}

{{/* The profile of the vGPU scheduler; nodeLabelSelector as NodeAffinity's
addedAffinity, so only matching nodes take vGPU pods. */}}
{{- define "gpugate.profile" -}}
- schedulerName: {{ .Values.schedulerName }}
  # vGPU pods carry no ResourceClaims; with DynamicResources on, a DeviceClass
  # mapping nvidia.com/gpu makes kube-scheduler refuse every node for them
  # (docs/operations.md, "DRA-backed GPU resources").
  plugins:
    multiPoint:
      disabled:
        - name: DynamicResources
  {{- with .Values.scheduler.nodeLabelSelector }}
  pluginConfig:
    - name: NodeAffinity
      args:
        addedAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                {{- range $k, $v := . }}
                  - {key: {{ $k | quote }}, operator: In, values: [{{ $v | toString | quote }}]}
                {{- end }}
  {{- end }}
{{- end -}}

{{/* A webhook's clientConfig: the Service, or customURL. */}}
{{- define "gpugate.clientConfig" -}}
{{- $url := .root.Values.scheduler.admissionWebhook.customURL | default dict -}}
clientConfig:
  {{- if $url.enabled }}
  url: https://{{ $url.host }}:{{ $url.port }}{{ .path }}
  {{- else }}
  service:
    name: {{ include "gpugate.fullname" .root }}
    namespace: {{ include "gpugate.namespace" .root }}
    path: {{ .servicePath }}
    port: {{ .root.Values.scheduler.service.httpPort }}
  {{- end }}
{{- end }}

{{/* The Deployment's replicas: scheduler.replicas (0 allowed, for the
migration's closed gate); at most 1 without leader election, and at most 1
without a kube-scheduler of gpugate's own, since then one process must
hold every reservation that kube-scheduler's extender calls see. */}}
{{- define "gpugate.replicas" -}}
{{- $r := int .Values.scheduler.replicas -}}
{{- if or (not .Values.scheduler.leaderElect) (not .Values.scheduler.kubeScheduler.enabled) -}}
{{- $r = min $r 1 -}}
{{- end -}}
{{- $r -}}
{{- end -}}

{{/* The nvidia keys gpugate reads or accepts (docs/configuration.md);
device-config.content's others are left out and listed by helm install. */}}
{{- define "gpugate.nvidiaKeys" -}}
{{- list "resourceCountName" "resourceMemoryName" "resourceMemoryPercentageName" "resourceCoreName" "resourcePriorityName" "defaultMemory" "defaultCores" "defaultGPUNum" "memoryFactor" "overwriteEnv" "gpuCorePolicy" "runtimeClassName" "deviceSplitCount" "deviceMemoryScaling" "deviceCoreScaling" "preConfiguredDeviceMemory" "libCudaLogLevel" "enableNumaTopology" "disableCoreLimit" "migProfileAllowlist" | toJson -}}
{{- end -}}

{{/* device-config.content's nvidia section, parsed (an empty dict when
there is none). */}}
{{- define "gpugate.contentNvidia" -}}
{{- include "gpugate.contentSection" (list . "nvidia") -}}
{{- end -}}

{{/* One section of device-config.content, parsed (an empty dict when
there is none): (list $root "section"). */}}
{{/* A list section of device-config.content (iluvatars), as JSON; [] when
absent. */}}
{{- define "gpugate.contentList" -}}
{{- $root := index . 0 -}}
{{- $content := (index $root.Values "device-config" | default dict).content | default "" -}}
{{- $list := list -}}
{{- if $content -}}
{{- $parsed := fromYaml $content -}}
{{- if hasKey $parsed "Error" -}}
{{- fail (printf "device-config.content is not YAML: %s" $parsed.Error) -}}
{{- end -}}
{{- $list = index $parsed (index . 1) | default list -}}
{{- end -}}
{{- toJson $list -}}
{{- end -}}

{{- define "gpugate.contentSection" -}}
{{- $root := index . 0 -}}
{{- $content := (index $root.Values "device-config" | default dict).content | default "" -}}
{{- $section := dict -}}
{{- if $content -}}
{{- $parsed := fromYaml $content -}}
{{- if hasKey $parsed "Error" -}}
{{- fail (printf "device-config.content is not YAML: %s" $parsed.Error) -}}
{{- end -}}
{{- $section = index $parsed (index . 1) | default dict -}}
{{- end -}}
{{- toJson $section -}}
{{- end -}}
