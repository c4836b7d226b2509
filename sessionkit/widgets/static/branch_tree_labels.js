// @ts-check
// BranchTree, the labels of the selected message: the form that adds one, the × that removes
// one, and the error the kernel answers when it refuses either. The kernel stores the change
// and sends the new `_labels` back (branch_tree_rows.js redraws the badges).

/** The label controls of one view: they live as long as the view (re-rendering the panel keeps what is typed in the form). */
class BTLabels {
  /** @param {BTModel} model */
  constructor(model) {
    this.model = model;
    /** The request id of the last label change asked for: its error shows in the form. */
    this.req = 0;
    /** The form adding a label to the selected message (skLabelForm). */
    this.form = skLabelForm((/** @type {{tag: string, rating: number | null, target: string}} */ fields) => {
      const id = model.get("selected_id");
      if (!id) return;
      this.req = skNextReq();
      model.send({ type: "add-label", id, ...fields, req: this.req });
    });
    /**
     * Asks the kernel to remove `label` (the × of its badge).
     * @param {{id: string}} label
     */
    this.remove = (label) => {
      this.req = skNextReq();
      model.send({ type: "remove-label", label: label.id, req: this.req });
    };
  }

  /**
   * Shows the kernel's error when it answers this view's last label change; true when it did.
   * @param {{req?: number, error?: string}} msg an error message from the kernel
   */
  showError(msg) {
    if (msg.req !== this.req) return false;
    const box = this.form.querySelector(".sk-label-error");
    if (box) box.textContent = msg.error || "";
    return true;
  }
}
