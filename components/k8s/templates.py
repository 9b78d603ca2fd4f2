"""Per-team training Job templates, kept on the cluster next to the team's queue.

A ConfigMap in the team's namespace holds a ready single-node and multi-node template with the
team's queue, service account and checkpoint root filled in; `spotctl render` writes them out.
The component records the spec it renders them from (its inputs, as a preview sees them), so
`spotctl job` writes a team's own Job from the same spec, on any of its classes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.k8s.jobs import TrainingJobSpec, multi_node_job, single_node_job, spec_document

CONFIGMAP = "training-job-templates"
SINGLE_NODE = "single-node.yaml"
MULTI_NODE = "multi-node.yaml"


@dataclass(frozen=True)
class JobTemplatesArgs:
    # Everything but the checkpoint root and the image reference, which are known only once the
    # bucket and the image repository exist.
    spec: TrainingJobSpec
    checkpoint_root: pulumi.Input[str]
    image: pulumi.Input[str]
    min_nodes: int
    max_nodes: int
    # The label by which the spec's placement selects its class (`class_placement`), so a run
    # of the team on another class selects that one the same way.
    compute_class_label: str | None = None


def template_documents(spec: TrainingJobSpec, min_nodes: int, max_nodes: int) -> dict[str, str]:
    """File name -> YAML of the Job."""
    multi = replace(spec, name=f"{spec.name}-multi")
    return {
        SINGLE_NODE: yaml.safe_dump(single_node_job(spec), sort_keys=False),
        MULTI_NODE: yaml.safe_dump(multi_node_job(multi, min_nodes, max_nodes), sort_keys=False),
    }


class JobTemplates(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: JobTemplatesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        # Validate now, not inside the apply where an error would surface late and unclear.
        template_documents(args.spec, args.min_nodes, args.max_nodes)
        spec = pulumi.Output.all(args.checkpoint_root, args.image).apply(
            lambda values: replace(args.spec, checkpoint_root=values[0], image=values[1])
        )
        recorded = {
            "spec": spec.apply(spec_document),
            "computeClassLabel": args.compute_class_label,
        }
        super().__init__("spot:templates:JobTemplates", name, recorded, opts)
        data = spec.apply(lambda filled: template_documents(filled, args.min_nodes, args.max_nodes))
        k8s.core.v1.ConfigMap(
            f"{name}-configmap",
            metadata={
                "name": CONFIGMAP,
                "namespace": args.spec.namespace,
                "labels": {"app.kubernetes.io/part-of": "spot-training"},
            },
            data=data,
            # Waits for what the component waits for: the team's namespace.
            opts=pulumi.ResourceOptions(parent=self, depends_on=opts.depends_on if opts else None),
        )
        self.register_outputs({})
