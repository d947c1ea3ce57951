// Lists: the header checkbox ticks or clears every job of the page; "N of M selected" follows the boxes; once
// every job of the page is ticked, "Select all N" offers the whole list (or all that match the filters), as
// Django's changelist does: it sets the form's scope to "matching", so the action (after its confirmation
// page) acts on every matching job, not only on those shown.
"use strict";
(function () {
    const panel = document.querySelector("[data-selection]");
    if (!panel) {
        return;
    }
    const all = document.querySelector("[data-select-all]");
    const boxes = Array.from(document.querySelectorAll("input.action-select"));
    const scope = panel.querySelector("[data-scope]");
    const counter = panel.querySelector("[data-selected-count]");
    const question = panel.querySelector("[data-select-question]");
    const allSelected = panel.querySelector("[data-all-selected]");

    function show() {
        const ticked = boxes.filter(function (box) { return box.checked; }).length;
        const matching = scope.value === "matching";
        counter.textContent = ticked + " of " + boxes.length + " selected";
        counter.hidden = matching;
        if (all) {
            all.checked = boxes.length > 0 && ticked === boxes.length;
        }
        if (question) {
            question.hidden = matching || boxes.length === 0 || ticked !== boxes.length;
            allSelected.hidden = !matching;
        }
    }

    function selectOnly(checked) {
        scope.value = "selected";
        for (const box of boxes) {
            box.checked = checked;
        }
        show();
    }

    if (all) {
        all.addEventListener("change", function () { selectOnly(all.checked); });
    }
    for (const box of boxes) {
        box.addEventListener("change", function () {
            scope.value = "selected"; // unticking one job leaves "all matching"
            show();
        });
    }
    if (question) {
        panel.querySelector("[data-select-matching]").addEventListener("click", function () {
            scope.value = "matching";
            show();
        });
        panel.querySelector("[data-clear-selection]").addEventListener("click", function () {
            selectOnly(false);
        });
    }
    show();
})();
