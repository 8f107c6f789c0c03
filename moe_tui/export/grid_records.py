"""The comparison's published JSON records (`moe-tui compare`, `investigate`, `roofline`, `explain`
--format json): defined in `moe_tui.records.grid`, beside the code that builds them, and named here
as part of the export contract (`moe_tui.export.schemas`)."""

from moe_tui.records.grid import (
    CellInvestigationJson as CellInvestigationJson,
)
from moe_tui.records.grid import (
    CellJson as CellJson,
)
from moe_tui.records.grid import (
    CellSnapshotJson as CellSnapshotJson,
)
from moe_tui.records.grid import (
    ClassDeltaJson as ClassDeltaJson,
)
from moe_tui.records.grid import (
    ClassTimeJson as ClassTimeJson,
)
from moe_tui.records.grid import (
    ControlJson as ControlJson,
)
from moe_tui.records.grid import (
    ExplanationJson as ExplanationJson,
)
from moe_tui.records.grid import (
    GateJson as GateJson,
)
from moe_tui.records.grid import (
    GatePromptJson as GatePromptJson,
)
from moe_tui.records.grid import (
    GridExtrasJson as GridExtrasJson,
)
from moe_tui.records.grid import (
    GridJson as GridJson,
)
from moe_tui.records.grid import (
    InvestigationPlanJson as InvestigationPlanJson,
)
from moe_tui.records.grid import (
    InvestigationReportJson as InvestigationReportJson,
)
from moe_tui.records.grid import (
    KernelJson as KernelJson,
)
from moe_tui.records.grid import (
    MovedKernelJson as MovedKernelJson,
)
from moe_tui.records.grid import (
    ProposalJson as ProposalJson,
)
from moe_tui.records.grid import (
    ProposedItemJson as ProposedItemJson,
)
from moe_tui.records.grid import (
    RooflineCellJson as RooflineCellJson,
)
from moe_tui.records.grid import (
    RooflineJson as RooflineJson,
)
from moe_tui.records.grid import (
    RooflineRowJson as RooflineRowJson,
)
from moe_tui.records.grid import (
    RooflineSidesJson as RooflineSidesJson,
)
from moe_tui.records.grid import (
    SideJson as SideJson,
)
from moe_tui.records.grid import (
    SideSnapshotJson as SideSnapshotJson,
)
